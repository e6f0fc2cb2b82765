"""The compiled fit's Hessian: forward differences of exact gradients against exact autodiff (issue 26).

``PYTHONPATH=. python benchmarks/_hessian_modes.py [jpsi dzero] [--events N] [--fr-all]``: for each
``bench_symbolic`` model with every parameter free (1e5 data + 1e5 phase-space events by default), after a
first fit, the Hessian of the loss at the minimum as the compiled fit's program would compute it (the
fitted parameters substituted by a vector ``x``, the data-only caches served as tensors, no Grappler),
three ways, each in a ``tf.function`` of its own:

- ``differences``: what the compiled fit does, forward differences of exact gradients, one value +
  gradient per parameter, steps of 1e-6 of each error (``SERIAL_HESSE_STEP``);
- ``reverse over reverse``: ``GradientTape.jacobian`` of the exact gradient (vectorized with pfor);
- ``forward over reverse``: a ``ForwardAccumulator`` around the gradient, vectorized over the unit
  tangents with ``tf.vectorized_map`` (D0 only unless ``--fr-all``: its trace is the longest).

For each: the trace, the first run, the warm run (median of 3), that in warm value + gradient calls, and
the largest difference from the reverse-over-reverse Hessian relative to its largest entry. Not in
``make bench``; ``RESULTS.md``, "The compiled fit's Hessian: differences or autodiff".
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_symbolic as bench  # noqa: E402

from zcache._engine.tf_internals import without_grappler  # noqa: E402
from zcache._fitting.batched_bfgs import forward_hessian  # noqa: E402
from zcache._fitting.compiled_fit import SERIAL_HESSE_STEP, CompiledFit  # noqa: E402


def _timed(fn, x: tf.Tensor) -> dict:
    t0 = time.perf_counter()
    fn.get_concrete_function(tf.TensorSpec(x.shape, tf.float64))
    t1 = time.perf_counter()
    first = fn(x).numpy()
    t2 = time.perf_counter()
    warm = []
    for _ in range(3):
        t3 = time.perf_counter()
        fn(x)
        warm.append(time.perf_counter() - t3)
    return {"trace_s": t1 - t0, "first_run_s": t2 - t1, "warm_s": float(np.median(warm)), "hessian": first}


def measure(key: str, n: int, forward_over_reverse: bool) -> None:
    cfg = bench.Config(n_data=n, n_phsp=n, repeats=1)
    sample = bench.make_sample(key, cfg, tw_ok=False)
    zc = bench.ZcacheFit(sample.model, sample.expression, sample.phsp, sample.data,
                         sorted(s.name for s in sample.free("all")), key)
    fit = zc.fit()
    params = list(zc.loss.params)
    x = tf.constant([float(p) for p in params], tf.float64)
    npar = len(params)
    program = CompiledFit.of(zc.loss, params)
    served = program._served(x.numpy())
    lower, upper = tf.constant(program.lower), tf.constant(program.upper)
    errors = tf.constant([fit["errors"][p.name] for p in params], tf.float64)  # HESSE's, at the minimum

    vg_fn = tf.function(lambda x: program._value_gradient(x, served), autograph=False)

    def vg(xb: tf.Tensor) -> tuple:
        f, g, ok = vg_fn(xb[0])
        return f[None], g[None], ok[None]

    def differences(x: tf.Tensor) -> tf.Tensor:
        _, g, _ = vg(x[None])
        return forward_hessian(vg, x[None], g, errors[None], lower, upper, step=SERIAL_HESSE_STEP)[0]

    def reverse_over_reverse(x: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(x)
            _, g, _ = program._value_gradient(x, served)
        return tape.jacobian(g, x)

    def forward_over_reverse(x: tf.Tensor) -> tf.Tensor:
        def hvp(v: tf.Tensor) -> tf.Tensor:
            with tf.autodiff.ForwardAccumulator(x, v) as acc:
                _, g, _ = program._value_gradient(x, served)
            return acc.jvp(g)
        return tf.vectorized_map(hvp, tf.eye(npar, dtype=tf.float64))

    methods = {"differences": differences, "reverse over reverse": reverse_over_reverse}
    if forward_over_reverse:
        methods["forward over reverse"] = forward_over_reverse
    out = {}
    with without_grappler():
        vg_fn(x)
        calls = []
        for _ in range(5):
            t0 = time.perf_counter()
            vg_fn(x)
            calls.append(time.perf_counter() - t0)
        vg_s = float(np.median(calls))
        for name, method in methods.items():
            out[name] = _timed(tf.function(method, autograph=False), x)
    exact = out["reverse over reverse"]["hessian"]
    print(f"{key}: {npar} parameters, {n} + {n} events, warm value + gradient {1e3 * vg_s:.1f} ms", flush=True)
    for name, row in out.items():
        diff = float(np.max(np.abs(row["hessian"] - exact)) / np.max(np.abs(exact)))
        print(f"| {key} | {name} | {row['trace_s']:.2f} | {row['first_run_s']:.2f} | {row['warm_s']:.3f} | "
              f"{row['warm_s'] / vg_s:.1f} | {diff:.1e} |", flush=True)


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(float(sys.argv[sys.argv.index("--events") + 1])) if "--events" in sys.argv else 100_000
    args = [a for a in args if a in bench.SPECS]
    for key in args or ["dzero", "jpsi"]:
        measure(key, n, forward_over_reverse="--fr-all" in sys.argv or key == "dzero")


if __name__ == "__main__":
    main()
