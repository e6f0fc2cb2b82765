"""Core-engine benchmarks: what a cache costs on a hit, a miss, and when nothing can be reused.

Every measurement evaluates :math:`\\sum_i \\exp(\\sin(x_i p))` in float64 over N events,
``x`` a :class:`zcache.Data` and ``p`` a :class:`zcache.Parameter`, and compares the
cached form (a :class:`zcache.CachedTensor` read inside a ``zcache.function``) side by
side with an uncached or plain-Variable baseline traced the same way:

===  ==========================================================================
a    hit: cached read vs reading a plain ``tf.Variable`` holding the same array
b    miss: first call after ``set_value`` vs the uncached computation
c    uncached computation (hit speedup = uncached / hit)
d    always changing: ``set_value`` + call every step, cached vs uncached
e    ``value_and_gradient`` on a hit and on a miss vs uncached
f    eager ``set_value`` with K = 1, 10, 100 dependent caches
g    eager ``cache.value()`` on a hit vs an eager Variable read
===  ==========================================================================

The cached and the uncached forms use separate Parameters, so the baseline's
``set_value`` never pays for invalidating a cache. Run ``python
benchmarks/bench_core.py [--quick]`` to print the tables, or ``run_all.py``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import zcache  # noqa: E402

try:  # benchmarks/ on sys.path: run as a script or from run_all.py
    from _harness import Timing, markdown_table, paired_ratio, time_interleaved, verdict
except ModuleNotFoundError:  # imported as benchmarks.bench_core
    from ._harness import Timing, markdown_table, paired_ratio, time_interleaved, verdict

__all__ = [
    "Config",
    "FULL",
    "QUICK",
    "TARGET",
    "bench_hit",
    "bench_miss",
    "bench_always_changing",
    "bench_gradient",
    "bench_invalidation",
    "bench_eager_read",
    "run",
]

#: Goal for cached / baseline ratios (hit vs Variable, miss vs uncached, always changing).
TARGET = 1.05

Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class Config:
    """Sizes and repeat counts of one benchmark run.

    Attributes
    ----------
    sizes : tuple of int
        Numbers of events N.
    repeats : int
        Samples per variant (their median is reported).
    warmup : int
        Untimed calls per variant first.
    min_sample_s : float
        A sample averages as many calls as make the fastest variant last this long.
    ks : tuple of int
        Numbers of caches depending on one parameter (invalidation benchmark).
    inval_events : int
        Events per cache in the invalidation benchmark (its cost does not depend on N).
    inval_repeats : int
        Samples per K in the invalidation benchmark (one ``set_value`` each).
    """

    sizes: tuple[int, ...]
    repeats: int
    warmup: int
    min_sample_s: float
    ks: tuple[int, ...]
    inval_events: int
    inval_repeats: int


FULL = Config(sizes=(100_000, 1_000_000), repeats=150, warmup=5, min_sample_s=10e-3,
              ks=(1, 10, 100), inval_events=1_000, inval_repeats=300)
QUICK = Config(sizes=(20_000,), repeats=5, warmup=2, min_sample_s=2e-3,
               ks=(1, 10), inval_events=100, inval_repeats=10)


def _expr(x: tf.Tensor, p: tf.Tensor) -> tf.Tensor:
    return tf.exp(tf.sin(x * p))


class _Toggle:
    """Callable that moves ``param`` by a tiny step on every call, so every call changes it."""

    def __init__(self, param: zcache.Parameter, step: float = 1e-7) -> None:
        self.param, self.step = param, step
        self.start = float(param.variable.numpy())
        self.count = 0

    def __call__(self) -> None:
        self.count += 1
        self.param.set_value(self.start + self.step * self.count)


class _Model:
    """Data, parameters, one cache and the traced functions compared for one N.

    ``p`` feeds the cache and ``q`` the uncached expression; both start at 1.0.
    """

    def __init__(self, n: int, seed: int = 0) -> None:
        arr = np.random.default_rng(seed).normal(size=n)
        self.n = n
        self.x = zcache.Data(arr, name=f"x_{n}")
        self.p = zcache.Parameter(f"p_cached_{n}", 1.0)
        self.q = zcache.Parameter(f"p_uncached_{n}", 1.0)
        x, p, q = self.x, self.p, self.q
        self.cache = zcache.CachedTensor(lambda: _expr(x.value(), p.value()), name=f"expsin_{n}")
        cache = self.cache
        self.plain = tf.Variable(_expr(tf.constant(arr), tf.constant(1.0, tf.float64)), name=f"plain_{n}")
        plain = self.plain

        @zcache.function(wraps="loss")
        def cached_loss() -> tf.Tensor:
            return tf.reduce_sum(cache.value())

        @zcache.function(wraps="loss")
        def uncached_loss() -> tf.Tensor:
            return tf.reduce_sum(_expr(x.value(), q.value()))

        @zcache.function(wraps="loss")
        def variable_loss() -> tf.Tensor:
            return tf.reduce_sum(plain)

        @tf.function(autograph=False)
        def variable_loss_tf() -> tf.Tensor:
            return tf.reduce_sum(plain)

        # The same cache built by hand (value Variable, flag, counters, tf.cond), without
        # zcache: what the Variable + flag + tf.cond design costs by itself.
        store = tf.Variable(plain.read_value(), shape=tf.TensorShape(None), name=f"store_{n}")
        flag = tf.Variable(True, name=f"flag_{n}")
        hits = tf.Variable(np.int64(0), name=f"hits_{n}")
        misses = tf.Variable(np.int64(0), name=f"misses_{n}")

        @tf.function(autograph=False)
        def handmade_loss() -> tf.Tensor:
            def compute_and_store() -> tf.Tensor:
                out = _expr(x.variable, p.variable)
                with tf.control_dependencies([store.assign(out), flag.assign(True), misses.assign_add(1)]):
                    return tf.identity(out)

            def read() -> tf.Tensor:
                with tf.control_dependencies([hits.assign_add(1)]):
                    return store.read_value()

            out = tf.stop_gradient(tf.cond(tf.logical_not(flag.value()), compute_and_store, read))
            out.set_shape([n])
            return tf.reduce_sum(out)

        @zcache.function(wraps="gradient")
        def cached_grad() -> tuple[tf.Tensor, tf.Tensor]:
            return zcache.value_and_gradient(lambda: tf.reduce_sum(cache.value()), [p])

        @zcache.function(wraps="gradient")
        def uncached_grad() -> tuple[tf.Tensor, tf.Tensor]:
            return zcache.value_and_gradient(lambda: tf.reduce_sum(_expr(x.value(), q.value())), [q])

        self.cached_loss, self.uncached_loss = cached_loss, uncached_loss
        self.variable_loss, self.variable_loss_tf = variable_loss, variable_loss_tf
        self.handmade_loss = handmade_loss
        self.cached_grad, self.uncached_grad = cached_grad, uncached_grad
        self.toggle_p, self.toggle_q = _Toggle(p), _Toggle(q)

    def zcache_functions(self) -> list[zcache.types.Function]:
        return [
            self.cached_loss, self.uncached_loss, self.variable_loss, self.cached_grad, self.uncached_grad,
        ]

    def check(self) -> list[str]:
        """Compare cached and uncached values and gradients at two parameter values.

        Returns
        -------
        list of str
            One message per disagreement (empty when all agree).
        """
        problems = []
        for value in (1.0, 1.1, 1.0):
            self.p.set_value(value)
            self.q.set_value(value)
            for label in ("miss", "hit"):
                v_c, g_c = self.cached_grad()
                v_u, g_u = self.uncached_grad()
                l_c, l_u = self.cached_loss(), self.uncached_loss()
                if not (np.allclose(v_c, v_u, rtol=1e-12) and np.allclose(l_c, l_u, rtol=1e-12)):
                    problems.append(f"N={self.n}, p={value}, {label}: cached value differs from uncached")
                if not np.allclose(g_c, g_u, rtol=1e-9):
                    problems.append(
                        f"N={self.n}, p={value}, {label}: cached gradient {g_c.numpy()} differs "
                        f"from uncached {g_u.numpy()}"
                    )
        return problems

    def retraces(self) -> list[str]:
        """Names of the zcache functions traced more than once."""
        funcs = self.zcache_functions()
        return [f"{f.__name__} ({f.trace_count} traces)" for f in funcs if f.trace_count > 1]


_MODELS: dict[int, _Model] = {}


def _model(n: int) -> _Model:
    if n not in _MODELS:
        _MODELS[n] = _Model(n)
    return _MODELS[n]


def _ratio_cells(num: Timing, den: Timing, label: str) -> dict[str, Any]:
    """Ratio of medians under ``label``, its repeat-by-repeat IQR as text and as ``_label``."""
    ratio, q25, q75 = paired_ratio(num, den)
    return {label: ratio, f"{label}, IQR": f"{q25:.3f}–{q75:.3f}", f"_{label}": (q25, q75)}


def _verdict(row: dict[str, Any], label: str) -> str:
    return verdict(row[label], TARGET, row[f"_{label}"])


# -- a, c: hit -------------------------------------------------------------------------------
def bench_hit(cfg: Config) -> Rows:
    """Traced cache hit vs a traced read of a plain Variable, and vs the uncached computation.

    Returns
    -------
    list of dict
        One row per N: median µs of the hit, the Variable read (``zcache.function`` and plain
        ``tf.function``) and the uncached computation, with their ratios.
    """
    rows = []
    for n in cfg.sizes:
        m = _model(n)
        m.cached_loss()  # make the cache valid
        t = time_interleaved(
            {
                "hit": m.cached_loss,
                "variable": m.variable_loss,
                "variable_tf": m.variable_loss_tf,
                "handmade": m.handmade_loss,
                "uncached": m.uncached_loss,
            },
            repeats=cfg.repeats,
            warmup=cfg.warmup,
            min_sample_s=cfg.min_sample_s,
        )
        row: dict[str, Any] = {
            "N": n,
            "hit [µs]": t["hit"].us,
            "Variable read [µs]": t["variable"].us,
            "Variable read, tf.function [µs]": t["variable_tf"].us,
            "hand-built cond hit, tf.function [µs]": t["handmade"].us,
            "uncached [µs]": t["uncached"].us,
        }
        row.update(_ratio_cells(t["hit"], t["variable"], "hit / Variable"))
        row["hit / Variable (tf.function)"] = t["hit"].median / t["variable_tf"].median
        row["hand-built / Variable (tf.function)"] = t["handmade"].median / t["variable_tf"].median
        row["speedup uncached / hit"] = t["uncached"].median / t["hit"].median
        row["calls per sample"] = t["hit"].inner
        rows.append(row)
    return rows


def _say_hit(rows: Rows) -> str:
    parts = []
    for r in rows:
        parts.append(
            f"At N = {r['N']:,} a traced cache hit took {r['hit [µs]']:.0f} µs against "
            f"{r['Variable read [µs]']:.0f} µs for reading a plain Variable in the same kind of "
            f"`zcache.function`: ratio {_verdict(r, 'hit / Variable')}. Against a bare "
            f"`tf.function` reading the Variable the ratio is {r['hit / Variable (tf.function)']:.3f}, "
            "and a cache built by hand from a value Variable, a flag and `tf.cond` (no zcache) "
            f"shows {r['hand-built / Variable (tf.function)']:.3f}. The uncached "
            f"computation took {r['uncached [µs]']:.0f} µs, so a hit is "
            f"{r['speedup uncached / hit']:.1f}× faster than recomputing."
        )
    return " ".join(parts)


# -- b: miss ---------------------------------------------------------------------------------
def bench_miss(cfg: Config) -> Rows:
    """First call after ``set_value`` (a miss) vs the uncached computation (``set_value`` untimed).

    Returns
    -------
    list of dict
        One row per N: median µs of the miss call and of the uncached call, and their ratio.
    """
    rows = []
    for n in cfg.sizes:
        m = _model(n)
        stats0 = m.cache.stats
        t = time_interleaved(
            {"miss": m.cached_loss, "uncached": m.uncached_loss},
            before={"miss": m.toggle_p, "uncached": m.toggle_q},
            repeats=cfg.repeats,
            warmup=cfg.warmup,
            min_sample_s=cfg.min_sample_s,
        )
        stats1 = m.cache.stats
        row: dict[str, Any] = {"N": n, "miss [µs]": t["miss"].us, "uncached [µs]": t["uncached"].us}
        row.update(_ratio_cells(t["miss"], t["uncached"], "miss / uncached"))
        row["hits during run"] = stats1["hits"] - stats0["hits"]
        row["calls per sample"] = t["miss"].inner
        rows.append(row)
    return rows


def _say_miss(rows: Rows) -> str:
    parts = []
    for r in rows:
        hits = "" if r["hits during run"] == 0 else (
            f" (**{r['hits during run']} calls were hits**, so the row is not a pure miss)"
        )
        parts.append(
            f"At N = {r['N']:,} a miss took {r['miss [µs]']:.0f} µs against {r['uncached [µs]']:.0f} µs "
            f"uncached: ratio {_verdict(r, 'miss / uncached')}{hits}."
        )
    return " ".join(parts) + (
        " The `set_value` before each call is not timed here; table d includes it."
    )


# -- d: always changing ----------------------------------------------------------------------
def bench_always_changing(cfg: Config) -> Rows:
    """A fit step where the cached part changes every call: ``set_value`` + call, both timed.

    Returns
    -------
    list of dict
        One row per N: median µs per step, cached and uncached, and their ratio.
    """
    rows = []
    for n in cfg.sizes:
        m = _model(n)

        def cached_step(m: _Model = m) -> None:
            m.toggle_p()
            m.cached_loss()

        def uncached_step(m: _Model = m) -> None:
            m.toggle_q()
            m.uncached_loss()

        t = time_interleaved({"cached": cached_step, "uncached": uncached_step},
                             repeats=cfg.repeats, warmup=cfg.warmup, min_sample_s=cfg.min_sample_s)
        row: dict[str, Any] = {
            "N": n,
            "cached step [µs]": t["cached"].us,
            "uncached step [µs]": t["uncached"].us,
        }
        row.update(_ratio_cells(t["cached"], t["uncached"], "cached / uncached"))
        row["extra per step [µs]"] = t["cached"].us - t["uncached"].us
        row["steps per sample"] = t["cached"].inner
        rows.append(row)
    return rows


def _say_always(rows: Rows) -> str:
    parts = []
    for r in rows:
        parts.append(
            f"At N = {r['N']:,} a step (set_value + traced call) cost {r['cached step [µs]']:.0f} µs "
            f"cached and {r['uncached step [µs]']:.0f} µs uncached, {r['extra per step [µs]']:+.0f} µs "
            f"per step: ratio {_verdict(r, 'cached / uncached')}."
        )
    return " ".join(parts)


# -- e: gradient -----------------------------------------------------------------------------
def bench_gradient(cfg: Config) -> Rows:
    """Traced ``value_and_gradient`` through the cache on a hit and on a miss vs uncached.

    Returns
    -------
    list of dict
        One row per N: median µs of value+gradient on a hit, on a miss and uncached, the
        uncached value alone, and the ratios to uncached value+gradient.
    """
    rows = []
    for n in cfg.sizes:
        m = _model(n)
        t = time_interleaved(
            {
                "hit": m.cached_grad,
                "miss": m.cached_grad,
                "uncached": m.uncached_grad,
                "value_only": m.uncached_loss,
            },
            before={"miss": m.toggle_p, "uncached": m.toggle_q},
            repeats=cfg.repeats,
            warmup=cfg.warmup,
            min_sample_s=cfg.min_sample_s,
        )
        row: dict[str, Any] = {
            "N": n,
            "grad on hit [µs]": t["hit"].us,
            "grad on miss [µs]": t["miss"].us,
            "uncached value+grad [µs]": t["uncached"].us,
            "uncached value only [µs]": t["value_only"].us,
        }
        row.update(_ratio_cells(t["hit"], t["uncached"], "hit / uncached"))
        row.update(_ratio_cells(t["miss"], t["uncached"], "miss / uncached"))
        row["calls per sample"] = t["hit"].inner
        rows.append(row)
    return rows


def _say_gradient(rows: Rows) -> str:
    parts = []
    for r in rows:
        hit, miss = r["hit / uncached"], r["miss / uncached"]
        if hit < 0.95:
            on_hit = f"a hit saves {100 * (1 - hit):.0f} % of the uncached cost"
        elif hit <= TARGET:
            on_hit = "a hit saves nothing measurable"
        else:
            on_hit = f"a hit costs {100 * (hit - 1):.0f} % more than uncached"
        on_miss = f"{100 * (miss - 1):.0f} % more than uncached" if miss > 1 else "no more than uncached"
        parts.append(
            f"At N = {r['N']:,} value+gradient took {r['grad on hit [µs]']:.0f} µs on a hit and "
            f"{r['grad on miss [µs]']:.0f} µs on a miss, against {r['uncached value+grad [µs]']:.0f} µs "
            f"uncached (ratios {hit:.3f} and {miss:.3f}; the uncached value alone takes "
            f"{r['uncached value only [µs]']:.0f} µs): when a gradient is asked for, {on_hit}, and a "
            f"miss costs {on_miss} (miss / uncached {_verdict(r, 'miss / uncached')})."
        )
    if min(r["hit / uncached"] for r in rows) > 0.95:
        parts.append(
            "So a valid cache does not make the gradient cheaper: after a hit the backward pass "
            "recomputes the cached function under a tape (zcache/_engine/cache_gradient.py). After a "
            "miss the gradient comes from the miss branch's own intermediates (TensorFlow's gradient "
            "of the cache's cond, zcache/_engine/traced_cache.py), so the function runs once, as "
            "uncached."
        )
    return " ".join(parts)


def _shifted_caches(x: zcache.Data, p: zcache.Parameter, k: int) -> list[zcache.CachedTensor]:
    """K caches ``sin(x p + i)``, all depending on ``p``."""
    return [
        zcache.CachedTensor(lambda i=i: tf.sin(x.value() * p.value() + float(i)), name=f"shifted_{i}")
        for i in range(k)
    ]


def _cache_of(x: zcache.Data, p: zcache.Parameter | None, name: str) -> zcache.CachedTensor:
    """A cache of ``exp(sin(x p))``, or of ``exp(sin(x))`` when ``p`` is None (no parameter)."""
    if p is None:
        return zcache.CachedTensor(lambda: _expr(x.value(), tf.constant(1.0, tf.float64)), name=name)
    return zcache.CachedTensor(lambda: _expr(x.value(), p.value()), name=name)


# -- f: invalidation -------------------------------------------------------------------------
def bench_invalidation(cfg: Config) -> Rows:
    """Eager ``set_value`` cost with K dependent caches, read eagerly only or inside a trace.

    Before each timed ``set_value`` the caches are made valid again (untimed), so every
    ``set_value`` really invalidates K caches.

    Returns
    -------
    list of dict
        One row per (kind of cache, K): median µs per ``set_value`` and per cache.
    """
    arr = np.linspace(-1.0, 1.0, cfg.inval_events)
    plain = tf.Variable(1.0, dtype=tf.float64)
    lone = zcache.Parameter("inval_lone", 1.0)
    state = {"i": 0}

    def next_value() -> float:
        state["i"] += 1
        return 1.0 + 1e-7 * state["i"]

    base = time_interleaved(
        {
            "tf.Variable.assign": lambda: plain.assign(next_value()),
            "set_value": lambda: lone.set_value(next_value()),
        },
        repeats=cfg.inval_repeats, warmup=cfg.warmup, inner=1,
    )
    k0 = base["set_value"].us
    rows: Rows = [
        {"caches read": "—", "K": 0, "what": name, "median [µs]": t.us, "IQR [µs]": t.iqr_us,
         "extra per cache [µs]": "—"}
        for name, t in base.items()
    ]
    for kind in ("eagerly", "in a trace"):
        for k in cfg.ks:
            x = zcache.Data(arr, name=f"xinv_{k}")
            p = zcache.Parameter(f"pinv_{kind[0]}_{k}", 1.0)
            caches = _shifted_caches(x, p, k)
            if kind == "eagerly":
                def refresh(caches: list[zcache.CachedTensor] = caches) -> None:
                    for c in caches:
                        c.value()
            else:
                refresh = zcache.function(wraps="loss")(
                    lambda caches=caches: tf.add_n([tf.reduce_sum(c.value()) for c in caches])
                )
            toggle = _Toggle(p)
            t = time_interleaved({"set_value": toggle}, before={"set_value": refresh},
                                 repeats=cfg.inval_repeats, warmup=cfg.warmup, inner=1)["set_value"]
            rows.append({
                "caches read": kind, "K": k, "what": "set_value", "median [µs]": t.us,
                "IQR [µs]": t.iqr_us, "extra per cache [µs]": (t.us - k0) / k,
            })
    return rows


def _say_invalidation(rows: Rows) -> str:
    by = {(r["caches read"], r["K"]): r for r in rows if r["what"] == "set_value"}
    assign = next(r for r in rows if r["what"] == "tf.Variable.assign")["median [µs]"]
    k0 = by[("—", 0)]["median [µs]"]
    parts = [
        f"A `set_value` on a parameter no cache depends on costs {k0:.0f} µs "
        f"(a bare eager `tf.Variable.assign`: {assign:.0f} µs)."
    ]
    for kind in ("eagerly", "in a trace"):
        ks = sorted(k for (kd, k) in by if kd == kind)
        if not ks:
            continue
        cells = ", ".join(f"K = {k}: {by[(kind, k)]['median [µs]']:.0f} µs" for k in ks)
        kmax = ks[-1]
        parts.append(
            f"With caches read {kind}: {cells}; at K = {kmax} each cache adds "
            f"{by[(kind, kmax)]['extra per cache [µs]']:.1f} µs."
        )
    return " ".join(parts)


# -- g: eager read ---------------------------------------------------------------------------
def bench_eager_read(cfg: Config) -> Rows:
    """Eager ``cache.value()`` on a hit vs an eager read of a plain Variable.

    Three caches of the same array: one never read in a trace (validity is a Python
    bool), the traced cache of the other tables (validity is read from its flag
    Variable), and one that depends on the data only (no gradient wrapper).

    Returns
    -------
    list of dict
        One row per (N, read): median µs and the ratio to the Variable read.
    """
    rows = []
    for n in cfg.sizes:
        m = _model(n)
        eager_cache = _cache_of(m.x, m.p, f"eager_{n}")
        data_cache = _cache_of(m.x, None, f"data_only_{n}")
        m.cached_loss()
        reads: dict[str, Callable[[], Any]] = {
            "plain Variable .value()": m.plain.value,
            "hit, cache never traced": eager_cache.value,
            "hit, cache also used in a trace": m.cache.value,
            "hit, cache without parameters": data_cache.value,
        }
        for read in reads.values():
            read()  # first read is a miss
        t = time_interleaved(reads, repeats=cfg.repeats, warmup=cfg.warmup, min_sample_s=cfg.min_sample_s)
        ref = t["plain Variable .value()"]
        for name, timing in t.items():
            rows.append({
                "N": n, "read": name, "median [µs]": timing.us, "IQR [µs]": timing.iqr_us,
                "ratio to Variable read": timing.median / ref.median,
            })
    return rows


def _say_eager(rows: Rows) -> str:
    parts = []
    for n in sorted({r["N"] for r in rows}):
        by = {r["read"]: r for r in rows if r["N"] == n}
        ref = by["plain Variable .value()"]["median [µs]"]
        cells = "; ".join(
            f"{name}: {r['median [µs]']:.0f} µs ({r['ratio to Variable read']:.1f}×)"
            for name, r in by.items() if name != "plain Variable .value()"
        )
        parts.append(f"At N = {n:,} an eager Variable read costs {ref:.0f} µs; {cells}.")
    return " ".join(parts) + (
        " These are Python and eager-op overheads (no data is copied), paid once per eager read."
    )


# -- driver ----------------------------------------------------------------------------------
_TABLES: list[tuple[str, str, Callable[[Config], Rows], Callable[[Rows], str]]] = [
    ("a, c", "Cache hit vs plain Variable read vs uncached (traced)", bench_hit, _say_hit),
    ("b", "Cache miss vs uncached computation (traced)", bench_miss, _say_miss),
    ("d", "Always changing: set_value + call every step", bench_always_changing, _say_always),
    ("e", "Gradient through the cache (traced value_and_gradient)", bench_gradient, _say_gradient),
    ("f", "Eager invalidation cost of set_value with K dependent caches", bench_invalidation,
     _say_invalidation),
    ("g", "Eager cache.value() on a hit vs eager Variable read", bench_eager_read, _say_eager),
]


def run(quick: bool) -> list[tuple[str, str]]:
    """Run every core benchmark and return ``(title, markdown body)`` pairs.

    Parameters
    ----------
    quick : bool
        Small N and few repeats (a smoke test of a few seconds).

    Returns
    -------
    list of (str, str)
        Title and body (table, then a paragraph reading the numbers) per table; the
        first pair describes the setup and the correctness checks.
    """
    cfg = QUICK if quick else FULL
    problems: list[str] = []
    for n in cfg.sizes:
        problems += _model(n).check()
    sections = []
    for label, title, bench, say in _TABLES:
        rows = bench(cfg)
        body = markdown_table(rows) + "\n\n**What the numbers say.** " + say(rows)
        sections.append((f"{label}. {title}", body))
    retraced = [name for n in cfg.sizes for name in _model(n).retraces()]
    setup = (
        f"Expression `reduce_sum(exp(sin(x * p)))`, float64, N = "
        f"{', '.join(f'{n:,}' for n in cfg.sizes)}; {cfg.repeats} interleaved repeats per variant "
        f"after {cfg.warmup} warm-up calls, median reported; a sample averages several calls when "
        "one call is short (column 'calls per sample'). Ratios are ratios of medians; the 'IQR' "
        "columns give the 25th–75th percentiles of the repeat-by-repeat ratios (a spread that "
        f"straddles the target means the verdict is within noise). Target for a, b, d: ≤ {TARGET}.\n\n"
        "**Checks.** "
        + ("Cached and uncached values and gradients agree (hit and miss, two parameter values)."
           if not problems else "**Disagreements:** " + "; ".join(problems) + ".")
        + " "
        + ("Every traced function was traced exactly once." if not retraced
           else "**Retraced:** " + ", ".join(retraced) + ".")
    )
    return [("Core engine: setup and checks", setup), *sections]


def main() -> None:
    """Print the tables (``--quick`` for the smoke-test sizes)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small N, few repeats")
    args = parser.parse_args()
    for title, body in run(args.quick):
        print(f"## {title}\n\n{body}\n")


if __name__ == "__main__":
    main()
