"""Where a warm fit's time goes: wall and CPU seconds inside chosen functions, without a profiler.

``python benchmarks/_warm_breakdown.py loop 40`` times 40 warm toys of a user's serial loop (``bench_fit``'s table
2b: ``set_data`` of 10,000 events, ``set_values`` of the start, ``Minuit().minimize``), ``... fit 12`` twelve warm
fits of table 1 (50,000 events); a third argument ``jit`` runs them under ``set_jit_mode('auto')``. Each listed
function is wrapped with a timer (the nesting shows in the names: ``program`` is the compiled program's
call inside ``CompiledFit._call``); the first fit is left out.
"""

from __future__ import annotations

import collections
import functools
import os
import sys
import time
from typing import Any

import numpy as np

import zcache
from zcache import loss as lossmod
from zcache import minimize as minmod
from zcache._engine import compile_cache
from zcache._engine import data as datamod
from zcache._fitting import compiled_fit
from zcache._fitting import objective as objmod

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _peers_fit as peers  # noqa: E402
import bench_fit  # noqa: E402

ACC: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])


def _timed(label: str, f: Any) -> Any:
    @functools.wraps(f)
    def timed(*args: Any, **kwargs: Any) -> Any:
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            return f(*args, **kwargs)
        finally:
            acc = ACC[label]
            acc[0] += time.perf_counter() - w0
            acc[1] += time.process_time() - c0
            acc[2] += 1
    return timed


def _wrap(owner: Any, name: str) -> None:
    setattr(owner, name, _timed(f"{getattr(owner, '__name__', owner)}.{name}", getattr(owner, name)))


def _instrument() -> None:
    # Every call of a traced program, through tf.function or its concrete function, ends in _call_flat; in a
    # warm fit that is the compiled program's call alone (the eager reads around it are single ops).
    from tensorflow.python.eager.polymorphic_function.concrete_function import ConcreteFunction

    ConcreteFunction._call_flat = _timed("  program (ConcreteFunction._call_flat)", ConcreteFunction._call_flat)
    for owner, name in [(datamod.Data, "set_data"), (zcache, "set_values"), (minmod.Minuit, "minimize"),
                        (lossmod.BaseLoss, "objective"), (compiled_fit.CompiledFit, "_served"),
                        (compiled_fit.CompiledFit, "run"), (compiled_fit.CompiledFit, "_call"),
                        (compile_cache, "_recheck"), (compiled_fit.CompiledFit, "_verdict"),
                        (minmod.Minuit, "_compiled_result"), (objmod.Objective, "finish"),
                        (objmod.Objective, "snapshot"), (objmod.Objective, "covariance"), (minmod, "_result")]:
        _wrap(owner, name)


def main() -> None:
    mode, n = sys.argv[1], int(sys.argv[2])
    jit = len(sys.argv) > 3 and sys.argv[3] == "jit"
    _instrument()
    if mode == "loop":
        setup = peers.TOY10K
        rng = np.random.default_rng(setup.seed)
        toys = [peers.generate(setup, rng, setup.n_events) for _ in range(n + 1)]
        loop = bench_fit._ZcacheLoop(toys[0], setup, compiled=True, name="zcache")
        run = loop.toy
    else:
        setup = peers.FIT50K
        fitter = bench_fit.ZcacheFitter(peers.dataset(setup), setup, jit=jit)
        toys = [None] * (n + 1)

        def run(x: Any) -> Any:
            del x
            return fitter.fit()
    with zcache.set_jit_mode("auto" if jit else False):
        run(toys[0])
        ACC.clear()
        w0, c0 = time.perf_counter(), time.process_time()
        records = [run(x) for x in toys[1:]]
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    print(f"{mode} jit={jit}: per fit wall {wall / n * 1e3:.2f} ms, CPU {cpu / n * 1e3:.2f} ms, "
          f"nfcn {np.median([r.nfcn for r in records]):g}, load {os.getloadavg()[0]:.1f}")
    for label, (w, c, count) in sorted(ACC.items(), key=lambda kv: -kv[1][1]):
        print(f"  {label:45s} wall {w / n * 1e3:7.2f} ms  CPU {c / n * 1e3:7.2f} ms  calls per fit {count / n:.1f}")


if __name__ == "__main__":
    main()
