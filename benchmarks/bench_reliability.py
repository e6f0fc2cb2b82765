"""Reliability benchmarks: memory and retracing over a long toy loop (issue 5).

A toy study runs the same fit thousands of times on new data; zfit users reported leaks
in exactly this loop (zfit #624, #665, #282). Two loops on the core engine only:

===  ==========================================================================
a    one model reused: per toy new data of another size (``set_data``), start values
     (``set_values``) and five gradient-descent steps (``value_and_gradient`` inside a
     traced function that sets the new values in the graph)
b    a new model per toy: new Parameters, Data, caches and traced functions per toy,
     dropped at the end of the toy (what a script that builds its model in the loop does)
c    b with TensorFlow's ``tf.custom_gradient`` registry left as TensorFlow keeps it (zcache's
     fix switched off): what the fix in ``zcache/_tf_internals.py`` prevents
===  ==========================================================================

Each table gives the number of toys, the time per toy, the retraces after the first toy, the
resident memory (RSS) after the warm-up toys and at the end, the live ``tf.Variable`` and
``FuncGraph`` objects and the dependency-graph nodes (after ``gc.collect()``). Run
``python benchmarks/bench_reliability.py [--quick]`` to print the tables, or ``run_all.py``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import gc  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.framework.func_graph import FuncGraph  # noqa: E402

import zcache  # noqa: E402
from zcache._engine import cache_gradient as _cache_gradient  # noqa: E402

try:  # benchmarks/ on sys.path: run as a script or from run_all.py
    from _harness import markdown_table
except ModuleNotFoundError:  # imported as benchmarks.bench_reliability
    from ._harness import markdown_table

__all__ = ["Config", "FULL", "QUICK", "CoreFit", "live_objects", "toy_loop", "new_model_loop", "run"]

Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class Config:
    """Sizes of one benchmark run.

    Attributes
    ----------
    toys : int
        Toys in loop a (one model reused).
    new_model_toys : int
        Toys in loop b (a new model per toy).
    unfixed_toys : int
        Toys in loop c (b without zcache's gradient-registry fix).
    warmup : int
        Toys run before the first measurement (traces, allocator, TensorFlow's caches).
    steps : int
        Gradient-descent steps per toy.
    samples : int
        Memory samples along loop a (for the trend).
    """

    toys: int
    new_model_toys: int
    unfixed_toys: int
    warmup: int
    steps: int
    samples: int


FULL = Config(toys=1000, new_model_toys=200, unfixed_toys=100, warmup=5, steps=5, samples=4)
QUICK = Config(toys=10, new_model_toys=2, unfixed_toys=1, warmup=1, steps=3, samples=1)


class CoreFit:
    """A Gaussian fit with cached parts, on the core engine only.

    ``z`` depends on parameters and data, ``x2`` on data only, ``lognorm`` on a parameter only.
    """

    def __init__(self, n: int = 300, seed: int = 1) -> None:
        rng = np.random.default_rng(seed)
        self.mu = zcache.Parameter("mu", 0.0, lower=-3.0, upper=3.0)
        self.sigma = zcache.Parameter("sigma", 1.0, lower=0.2, upper=5.0)
        self.x = zcache.Data(rng.normal(size=n), name="x")
        mu, sigma, x = self.mu, self.sigma, self.x
        self.z = zcache.CachedTensor(lambda: (x.value() - mu.value()) / sigma.value(), name="z")
        self.x2 = zcache.CachedTensor(lambda: tf.reduce_mean(x.value() ** 2), name="x2")
        self.lognorm = zcache.CachedTensor(lambda: tf.math.log(sigma.value() * np.sqrt(2.0 * np.pi)), name="lognorm")
        z, lognorm, x2 = self.z, self.lognorm, self.x2

        def nll() -> tf.Tensor:
            return tf.reduce_mean(0.5 * z.value() ** 2) + lognorm.value()

        @zcache.function(wraps="gradient")
        def step(rate: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            value, grad = zcache.value_and_gradient(nll, [mu, sigma])
            zcache.set_values([mu, sigma], [tf.clip_by_value(mu.value() - rate * grad[0], -3.0, 3.0),
                                            tf.clip_by_value(sigma.value() - rate * grad[1], 0.2, 5.0)])
            return value, grad

        @zcache.function(wraps="loss")
        def loss() -> tuple[tf.Tensor, tf.Tensor]:
            return nll(), x2.value()

        self.step, self.loss = step, loss

    def functions(self) -> list[zcache.types.Function]:
        return [self.step, self.loss]

    def caches(self) -> list[zcache.CachedTensor]:
        return [self.z, self.x2, self.lognorm]

    def toy(self, i: int, steps: int) -> tuple[float, float]:
        """New data of another size, start values, ``steps`` descent steps; (start, end) loss."""
        rng = np.random.default_rng(100 + i)
        self.x.set_data(rng.normal(0.3, 1.4, size=200 + (37 * i) % 150))
        zcache.set_values([self.mu, self.sigma], [0.0, 1.0])
        start = float(self.loss()[0])
        rate = tf.constant(0.5, tf.float64)
        for _ in range(steps):
            self.step(rate)
        return start, float(self.loss()[0])

    def reference_nll(self) -> float:
        """The loss at the current values, in numpy (no cache)."""
        x = self.x.numpy()
        mu, sigma = float(self.mu.numpy()), float(self.sigma.numpy())
        return float(np.mean(0.5 * ((x - mu) / sigma) ** 2) + np.log(sigma * np.sqrt(2.0 * np.pi)))


def live_objects() -> dict[str, float]:
    """RSS and live TensorFlow / zcache objects after a full garbage collection."""
    for _ in range(2):
        gc.collect()
    counts = {"tf.Variable": 0, "FuncGraph": 0}
    for obj in gc.get_objects():
        if isinstance(obj, tf.Variable):
            counts["tf.Variable"] += 1
        elif isinstance(obj, FuncGraph):
            counts["FuncGraph"] += 1
    return {
        "RSS [MiB]": psutil.Process().memory_info().rss / 2**20,
        **counts,
        "graph nodes": zcache.dependency_graph().number_of_nodes(),
    }


def _row(label: str, toys: int, seconds: float, trend: Rows, retraces: int,
         extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One summary row from the memory samples ``trend`` (the first after warm-up, the last at the end)."""
    before, after = trend[0], trend[-1]
    half = min(trend, key=lambda t: abs(t["toys done"] - toys / 2))
    growth = after["RSS [MiB]"] - before["RSS [MiB]"]
    late = after["RSS [MiB]"] - half["RSS [MiB]"]
    late_toys = after["toys done"] - half["toys done"]
    return {
        "loop": label,
        "toys measured": toys,
        "ms per toy": 1e3 * seconds / max(toys, 1),
        "retraces after toy 1": retraces,
        "RSS after warm-up [MiB]": before["RSS [MiB]"],
        "RSS growth [MiB]": growth,
        "RSS growth, 2nd half [MiB]": late,
        "2nd half per 1000 toys [MiB]": 1e3 * late / max(late_toys, 1),
        "tf.Variable (start → end)": f"{before['tf.Variable']:.0f} → {after['tf.Variable']:.0f}",
        "FuncGraph (start → end)": f"{before['FuncGraph']:.0f} → {after['FuncGraph']:.0f}",
        "graph nodes (start → end)": f"{before['graph nodes']:.0f} → {after['graph nodes']:.0f}",
        **(extra or {}),
        "_before": before,
        "_after": after,
    }


# -- a: one model reused ------------------------------------------------------------------
def toy_loop(cfg: Config) -> tuple[Rows, Rows]:
    """Loop a: the recommended toy loop, one model reused.

    Returns
    -------
    rows, trend : list of dict
        One summary row, and memory samples along the loop.
    """
    fit = CoreFit()
    for i in range(cfg.warmup):
        fit.toy(i, cfg.steps)
    traces = [f.trace_count for f in fit.functions()]
    stats0 = {c.name: c.stats for c in fit.caches()}
    trend = [{"toys done": 0, **live_objects()}]
    marks = {int(round(cfg.toys * k / cfg.samples)) for k in range(1, cfg.samples + 1)}
    not_descending = 0
    t_loop = 0.0
    for j in range(1, cfg.toys + 1):
        t0 = time.perf_counter()
        start, end = fit.toy(cfg.warmup + j, cfg.steps)
        t_loop += time.perf_counter() - t0
        not_descending += end >= start
        if j in marks:
            trend.append({"toys done": j, **live_objects()})
    retraces = sum(f.trace_count for f in fit.functions()) - sum(traces)
    stale = abs(float(fit.loss()[0]) - fit.reference_nll()) > 1e-12 * abs(fit.reference_nll())
    stats1 = {c.name: c.stats for c in fit.caches()}
    misses = {name: stats1[name]["misses"] - stats0[name]["misses"] for name in stats1}
    hits = {name: stats1[name]["hits"] - stats0[name]["hits"] for name in stats1}
    row = _row("a. one model reused", cfg.toys, t_loop, trend, retraces, {
        "misses / hits per toy (z, x2, lognorm)": ", ".join(
            f"{misses[n] / cfg.toys:.1f} / {hits[n] / cfg.toys:.1f}" for n in ("z", "x2", "lognorm")),
        "toys where the loss did not descend": not_descending,
        "final loss equals numpy": not stale,
    })
    return [row], trend


# -- b, c: a new model per toy ----------------------------------------------------------------
def new_model_loop(toys: int, warmup: int, steps: int, samples: int) -> dict[str, Any]:
    """Loop b: a new model and new traced functions per toy, dropped after the toy."""
    traces: list[int] = []

    def toy(i: int) -> None:
        fit = CoreFit(n=200, seed=i)
        fit.toy(i, steps)
        traces.append(sum(f.trace_count for f in fit.functions()))

    for i in range(warmup):
        toy(i)
    trend = [{"toys done": 0, **live_objects()}]
    marks = {int(round(toys * k / samples)) for k in range(1, samples + 1)}
    seconds = 0.0
    for j in range(1, toys + 1):
        t0 = time.perf_counter()
        toy(warmup + j)
        seconds += time.perf_counter() - t0
        if j in marks:
            trend.append({"toys done": j, **live_objects()})
    # each new function traces once: retraces are traces beyond one per function
    retraces = sum(t - 2 for t in traces)
    return {"toys": toys, "seconds": seconds, "trend": trend, "retraces": retraces}


def _new_model_rows(cfg: Config) -> tuple[Rows, Rows]:
    fixed = new_model_loop(cfg.new_model_toys, cfg.warmup, cfg.steps, cfg.samples)
    rows = [_row("b. new model per toy", fixed["toys"], fixed["seconds"], fixed["trend"], fixed["retraces"])]
    tie = _cache_gradient.tie_gradient_to_graph
    _cache_gradient.tie_gradient_to_graph = lambda result: None  # TensorFlow's own behaviour
    try:
        unfixed = new_model_loop(cfg.unfixed_toys, 1, cfg.steps, cfg.samples)
    finally:
        _cache_gradient.tie_gradient_to_graph = tie
    rows.append(_row("c. b without zcache's registry fix", unfixed["toys"], unfixed["seconds"], unfixed["trend"],
                     unfixed["retraces"]))
    trend = [{"loop": "b", **t} for t in fixed["trend"]] + [{"loop": "c", **t} for t in unfixed["trend"]]
    return rows, trend


# -- reporting ---------------------------------------------------------------------------------
def _say_toy(rows: Rows, trend: Rows) -> str:
    r = rows[0]
    rss = [t["RSS [MiB]"] for t in trend]
    text = (
        f"Over {r['toys measured']:,} toys ({r['ms per toy']:.1f} ms each) the traced functions were traced "
        f"{'never again' if r['retraces after toy 1'] == 0 else str(r['retraces after toy 1']) + ' more times'} "
        f"after the first toy. RSS went from {rss[0]:.1f} MiB to {rss[-1]:.1f} MiB ({r['RSS growth [MiB]']:+.1f} MiB; "
        f"samples {', '.join(f'{v:.1f}' for v in rss)} MiB); live tf.Variables {r['tf.Variable (start → end)']}, "
        f"FuncGraphs {r['FuncGraph (start → end)']}, dependency-graph nodes {r['graph nodes (start → end)']}. "
        f"Per toy the caches missed/hit (z, x2, lognorm) {r['misses / hits per toy (z, x2, lognorm)']}: "
        "`x2` (data only) is computed once per toy, `z` and `lognorm` once per parameter change."
    )
    if r["toys where the loss did not descend"] or not r["final loss equals numpy"]:
        text += " **Check failed:** " + ("the loss did not descend in some toys; " if r[
            "toys where the loss did not descend"] else "") + (
            "" if r["final loss equals numpy"] else "the final loss differs from numpy.")
    return text


def _say_new_model(rows: Rows) -> str:
    b, c = rows
    parts = [
        f"Building a new model and new traced functions per toy costs {b['ms per toy']:.0f} ms per toy (tracing "
        f"included). Over {b['toys measured']} toys RSS changed by {b['RSS growth [MiB]']:+.1f} MiB, "
        f"{b['RSS growth, 2nd half [MiB]']:+.1f} MiB in the second half ({b['2nd half per 1000 toys [MiB]']:+.0f} MiB "
        f"per 1000 toys at that rate); live FuncGraphs {b['FuncGraph (start → end)']}, tf.Variables "
        f"{b['tf.Variable (start → end)']}, dependency-graph nodes {b['graph nodes (start → end)']}: every dropped "
        "model left the dependency graph and its graphs and Variables were freed (what RSS still gains is the "
        "allocator settling, see the samples)."
    ]
    parts.append(
        f"Without zcache's fix (TensorFlow's `tf.custom_gradient` keeps every traced backward function in a "
        f"global registry) the same loop kept FuncGraphs {c['FuncGraph (start → end)']} and tf.Variables "
        f"{c['tf.Variable (start → end)']} over {c['toys measured']} toys, and RSS grew by "
        f"{c['RSS growth [MiB]']:+.1f} MiB ({c['2nd half per 1000 toys [MiB]']:+.0f} MiB per 1000 toys in the "
        "second half)."
    )
    return " ".join(parts)


def run(quick: bool) -> list[tuple[str, str]]:
    """Run the reliability benchmarks and return ``(title, markdown body)`` pairs.

    Parameters
    ----------
    quick : bool
        Few toys (a smoke test of a few seconds).

    Returns
    -------
    list of (str, str)
        Title and body (table, then a paragraph reading the numbers) per table.
    """
    cfg = QUICK if quick else FULL
    rows, trend = toy_loop(cfg)
    new_rows, new_trend = _new_model_rows(cfg)
    setup = (
        f"A Gaussian negative log-likelihood with three caches (parameters and data, data only, parameter "
        f"only); per toy new data of 200–349 events, start values, {cfg.steps} gradient-descent steps in a "
        f"traced `zcache.function` (value_and_gradient, then `set_values` in the graph). {cfg.warmup} warm-up "
        "toys before the first measurement; objects are counted after `gc.collect()`."
    )
    return [
        ("Reliability: setup", setup),
        ("a. Toy loop, one model reused", markdown_table(rows) + "\n\n" + markdown_table(trend)
         + "\n\n**What the numbers say.** " + _say_toy(rows, trend)),
        ("b, c. A new model per toy", markdown_table(new_rows) + "\n\n" + markdown_table(new_trend)
         + "\n\n**What the numbers say.** " + _say_new_model(new_rows)),
    ]


def main() -> None:
    """Print the tables (``--quick`` for the smoke-test sizes)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few toys")
    args = parser.parse_args()
    for title, body in run(args.quick):
        print(f"## {title}\n\n{body}\n")


if __name__ == "__main__":
    main()
