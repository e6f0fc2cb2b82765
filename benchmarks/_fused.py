"""Fused against unfused line shapes (issue 26): ``PYTHONPATH=. python benchmarks/_fused.py [n] [model] [--groups]``.

Builds the bridged model twice from one ampform model and sample, ``fused=True`` and ``fused=False``
(the default), every parameter free (couplings, masses, widths), ``n`` data and ``n`` phase-space events.
For each: the first value + gradient call (tracing; XLA compiles for the fused one), then after
``zcache.precompute`` (what every fit does) medians of interleaved value and value + gradient calls at
alternating points (every parameter moves), and the largest difference between the two models' gradients.
``--groups``: each group's program alone, fused and not (where the time goes). Not in ``make bench``
(``bench_symbolic`` runs the default, unfused, against tensorwaves); RESULTS.md cites it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import bench_symbolic as bs  # noqa: E402

from zcache import precompute  # noqa: E402
from zcache.amplitude import from_helicity_model  # noqa: E402
from zcache.loss import UnbinnedNLL  # noqa: E402


def build(sample: bs.Sample, fused: bool) -> tuple[UnbinnedNLL, float]:
    floating = sorted(s.name for s in sample.free("all"))
    bounds = {s.name: bs.peers.fit_limits(s.name) for s in sample.model.parameter_defaults}
    params = {s.name: {"value": float(v), "lower": bounds[s.name][0], "upper": bounds[s.name][1]}
              for s, v in sample.model.parameter_defaults.items() if bounds[s.name]}
    tag = "fused" if fused else "plain"
    model = from_helicity_model(sample.model, sample.phsp, expression=sample.expression, floating=floating,
                                parameters=params, name=f"{sample.key}_{tag}", fused=fused)
    loss = UnbinnedNLL(model, model.to_data(sample.data, name=f"{sample.key}_{tag}_data"))
    t0 = time.perf_counter()
    loss.value_gradient()
    return loss, time.perf_counter() - t0


def main(n: int = 20_000, key: str = "jpsi", repeats: int = 15) -> None:
    cfg = bs.Config(n_data=n, n_phsp=n, repeats=repeats)
    sample = bs.make_sample(key, cfg, tw_ok=False)
    losses, first = {}, {}
    for fused in (True, False):
        losses[fused], first[fused] = build(sample, fused)
        precompute(losses[fused])
    x = {f: np.array([float(p) for p in loss.params]) for f, loss in losses.items()}
    times = {(f, what): [] for f in losses for what in ("value", "value+gradient")}
    grads = {}
    for i in range(repeats + 2):
        for f, loss in losses.items():
            point = x[f] * (1.0 + 1e-3 * (i % 2))
            t0 = time.perf_counter()
            loss.value_at(point, loss.params).numpy()
            t1 = time.perf_counter()
            grads[f] = loss.value_gradient_at(point, loss.params)[1].numpy()
            t2 = time.perf_counter()
            if i >= 2:  # the first two calls at each point trace the moved programs
                times[f, "value"].append(t1 - t0)
                times[f, "value+gradient"].append(t2 - t1)
    diff = np.abs(grads[True] - grads[False]).max() / np.abs(grads[False]).max()
    print(f"{key}, {n} data + {n} phase-space events, {len(x[True])} free parameters, {repeats} interleaved repeats")
    print("| groups | first value + gradient [s] | value [ms] | value + gradient [ms] |")
    print("| --- | ---: | ---: | ---: |")
    for f in (True, False):
        print(f"| {'fused' if f else 'unfused'} | {first[f]:.1f} | {1e3 * np.median(times[f, 'value']):.1f} | "
              f"{1e3 * np.median(times[f, 'value+gradient']):.1f} |")
    print(f"gradients differ by {diff:.1e} (relative to the largest)")


def groups(n: int = 100_000, key: str = "jpsi", repeats: int = 9) -> None:
    """Each group's program alone on the phase-space sample: value and value + gradient of sum |A|^2."""
    import tensorflow as tf

    sample = bs.make_sample(key, bs.Config(n_data=n, n_phsp=n, repeats=repeats), tw_ok=False)
    print("| group (parameters) | groups | forward [ms] | value + gradient [ms] |")
    print("| --- | --- | ---: | ---: |")
    for fused in (True, False):
        model = build(sample, fused)[0].model
        stack = model._data_stack(model.phasespace)
        events = model._events(model.phasespace)
        for g in range(len(model._groups)):
            symbols, program = model._group_program(g)
            values = [tf.constant(float(model.symbol_params[s].value()), tf.float64) for s in symbols]
            forward = tf.function(lambda program=program, values=values, stack=stack, events=events:
                                  program(stack, events, values))

            @tf.function
            def value_gradient(program=program, values=values, stack=stack, events=events):
                with tf.GradientTape() as tape:
                    tape.watch(values)
                    y = tf.reduce_sum(tf.abs(program(stack, events, values)) ** 2)
                return y, tape.gradient(y, values)

            forward(), value_gradient()
            tf_, tg = [], []
            for _ in range(repeats):
                t0 = time.perf_counter()
                forward().numpy()
                t1 = time.perf_counter()
                value_gradient()[0].numpy()
                tf_.append(t1 - t0)
                tg.append(time.perf_counter() - t1)
            print(f"| {g} ({len(symbols)}) | {'fused' if fused else 'unfused'} | {1e3 * np.median(tf_):.1f} | "
                  f"{1e3 * np.median(tg):.1f} |")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    run = groups if "--groups" in sys.argv else main
    run(int(float(args[0])) if args else 20_000, args[1] if len(args) > 1 else "jpsi")
