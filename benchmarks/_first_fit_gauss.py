"""The first fit of table 1's extended Gauss + Exponential (50k events) in a fresh process (issue 54).

``python benchmarks/_first_fit_gauss.py [--phases] [--traces] [--profile N]``: imports zcache (untimed), builds
the fit of ``bench_fit`` table 1b (untimed), times the first ``Minuit().minimize(loss)`` and prints one
JSON line: the time (``--phases``: split into the objective with precompute, the served caches,
the program's trace and its first call), and with ``--traces`` every graph TensorFlow built during it (the Python
function's name, the graph's op count, seconds to build it, nested graphs inside). ``--profile N``
prints cProfile's N top functions by cumulative and by own time. Run it in fresh processes,
alternately old and new code (``RESULTS.md``, "The first fit in a fresh process").
"""

from __future__ import annotations

import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT), str(ROOT / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)

import _peers_fit as peers  # noqa: E402

import zcache  # noqa: E402
from zcache.loss import ExtendedUnbinnedNLL  # noqa: E402
from zcache.minimize import Minuit  # noqa: E402
from zcache.models import Exponential, Gaussian, Space, SumPdf  # noqa: E402


def _record_graphs() -> list[dict]:
    """Wrap TensorFlow's graph builder: one record per graph built (nested graphs nest)."""
    from tensorflow.python.framework import func_graph

    built: list[dict] = []
    stack: list[dict] = []
    original = func_graph.func_graph_from_py_func

    def wrapped(name, python_func, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        rec = {"name": str(name), "func": getattr(python_func, "__qualname__", repr(python_func))[:60],
               "inner": []}
        (stack[-1]["inner"] if stack else built).append(rec)
        stack.append(rec)
        t0 = time.perf_counter()
        try:
            g = original(name, python_func, *args, **kwargs)
            rec["ops"] = len(g.get_operations())
            return g
        finally:
            rec["s"] = round(time.perf_counter() - t0, 4)
            stack.pop()

    func_graph.func_graph_from_py_func = wrapped
    return built


def _time_phases() -> dict[str, float]:
    """Wrap the phases of a compiled fit: the objective (precompute), served caches, trace, run."""
    from zcache import minimize
    from zcache._fitting import compiled_fit
    from zcache._fitting.compiled_fit import CompiledFit

    phases = {"objective": 0.0, "served": 0.0, "trace": 0.0, "load": 0.0, "check": 0.0, "run": 0.0}

    def timed(owner: object, attr: str, key: str) -> None:
        original = getattr(owner, attr)

        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                phases[key] += time.perf_counter() - t0

        setattr(owner, attr, wrapper)

    timed(minimize, "_objective", "objective")
    timed(CompiledFit, "_served", "served")
    timed(CompiledFit, "_trace_for_every_size", "trace")
    timed(CompiledFit, "run", "run")
    # the trace store (ZCACHE_TRACE_STORE=1): reading, checking and registering an entry; the check of a
    # loaded program's loss and gradient at the start against an eager evaluation
    timed(compiled_fit, "load", "load")
    timed(CompiledFit, "_agrees", "check")
    return phases


def main() -> None:
    built = _record_graphs() if "--traces" in sys.argv else None
    phases = _time_phases() if "--phases" in sys.argv else None
    setup = peers.FIT50K
    x = peers.dataset(setup)
    space = Space("x", setup.low, setup.high)
    params = {p: zcache.Parameter(p, setup.start[p], lower=setup.limits[p][0], upper=setup.limits[p][1])
              for p in peers.PARAMS}
    model = SumPdf([Gaussian(space, params["mu"], params["sigma"]), Exponential(space, params["lam"])],
                   yields=[params["nsig"], params["nbkg"]])
    loss = ExtendedUnbinnedNLL(model, zcache.Data(np.asarray(x), name="x_first_fit"))
    if built is not None:
        built.clear()
    profile = cProfile.Profile() if "--profile" in sys.argv else None
    t0 = time.perf_counter()
    if profile:
        profile.enable()
    result = Minuit(tol=peers.iminuit_tol(0.5)).minimize(loss)
    if profile:
        profile.disable()
    first_s = time.perf_counter() - t0
    first_phases = {k: round(v, 4) for k, v in phases.items()} if phases is not None else None
    fitted = [float(p) for p in loss.params]
    zcache.set_values(list(params.values()), [setup.start[p] for p in params])
    t0 = time.perf_counter()
    Minuit(tol=peers.iminuit_tol(0.5)).minimize(loss)
    warm_s = time.perf_counter() - t0
    out = {"first_s": round(first_s, 4), "warm_s": round(warm_s, 4), "path": result.path,
           "valid": bool(result.valid), "fmin": float(result.fmin), "values": fitted,
           "errors": {str(k): repr(e) for k, e in result.errors.items()}}
    if first_phases is not None:
        # the program's first call: the run less its served caches, its trace (or load) and the check
        first_phases["first_call"] = round(first_phases["run"] - sum(first_phases[k] for k in ("served", "trace",
                                                                                                "load", "check")), 4)
        # the rest of Minuit().minimize: what runs around the objective and the compiled fit
        first_phases["other"] = round(first_s - first_phases["objective"] - first_phases["run"], 4)
        out["phases"] = first_phases
    if built is not None:
        out["graphs"] = built
    print(json.dumps(out))
    if profile:
        top = int(sys.argv[sys.argv.index("--profile") + 1])
        stats = pstats.Stats(profile, stream=sys.stderr)
        stats.sort_stats("cumulative").print_stats(top)
        stats.sort_stats("tottime").print_stats(top)


if __name__ == "__main__":
    main()
