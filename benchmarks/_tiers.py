"""The first 50k fit on each tier, in a fresh process (issue 54; not in ``make bench``).

``python benchmarks/_tiers.py MODE``: imports zcache and builds ``_first_fit_gauss``'s fit (table 1's extended
Gauss + Exponential, 50,000 events; untimed), then times the first fit on one tier and prints one JSON line (wall
and CPU seconds of the fit, and of HESSE alone where it is separate). Modes:

- ``compiled``: ``Minuit(tiered=False)``, the compiled fit as before the tiered start (trace, first call, fit);
- ``eager``: MIGRAD + HESSE on eager value + gradient (``set_graph_mode(False)``);
- ``traced``: MIGRAD + HESSE on traced value + gradient functions (``Minuit(compiled=False)``);
- ``eager+bg`` / ``traced+bg``: the same while another thread traces the compiled program and prepares it
  (:meth:`zcache._fitting.compiled_fit.CompiledFit.build`), joined after the fit (``bg_s``: when it ended);
- ``default``: ``Minuit()`` as shipped: the tiered start (the first fit MIGRAD's, then the program built on a
  thread; the second fit waits for what is left of the build);
- ``once-compiled`` / ``once-tiered``: a script that fits once and exits (``Minuit(tiered=False)`` /
  ``Minuit(tiered=True)``), nothing after the fit: time the whole process from outside
  (``/usr/bin/time -f "%e %U %S" python benchmarks/_tiers.py once-tiered``), the exit included (it waits for a
  build still running); a second line gives the wall and CPU seconds from the fit's start to the process's last
  exit handler (``to_exit_*``: the fit and whatever the exit waited for, without the imports).

After the first fit: HESSE alone at its minimum (central differences of exact gradients), the second fit from the
start right away (``second_s``) and a third (``third_s``, warm). The ``eager``/``traced`` modes take their
Hessians by differences too, as the tiered start's first fit does (not the traced second-order program).

Each run is one process: run the modes interleaved, several times, and compare medians (RESULTS.md,
"Tiered start (issue 54)").
"""

from __future__ import annotations

import atexit
import json
import sys
import threading
import time
from pathlib import Path

#: ``once-*`` modes: the clocks at the fit's start, read again at the very end of the process (registered before
#: zcache is imported, so that it runs after zcache's own exit handler, which waits for builds in flight)
_ONCE: dict[str, float] = {}


def _to_exit() -> None:
    if _ONCE:
        print(json.dumps({"to_exit_wall_s": round(time.perf_counter() - _ONCE["wall"], 4),
                          "to_exit_cpu_s": round(time.process_time() - _ONCE["cpu"], 4)}), flush=True)


atexit.register(_to_exit)

import numpy as np  # noqa: E402 - after the exit clock (above)

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT), str(ROOT / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)

import _peers_fit as peers  # noqa: E402

import zcache  # noqa: E402
from zcache.loss import ExtendedUnbinnedNLL  # noqa: E402
from zcache.minimize import Minuit  # noqa: E402
from zcache.models import Exponential, Gaussian, Space, SumPdf  # noqa: E402


def _loss() -> tuple[ExtendedUnbinnedNLL, dict]:
    setup = peers.FIT50K
    x = peers.dataset(setup)
    space = Space("x", setup.low, setup.high)
    params = {p: zcache.Parameter(p, setup.start[p], lower=setup.limits[p][0], upper=setup.limits[p][1])
              for p in peers.PARAMS}
    model = SumPdf([Gaussian(space, params["mu"], params["sigma"]), Exponential(space, params["lam"])],
                   yields=[params["nsig"], params["nbkg"]])
    return ExtendedUnbinnedNLL(model, zcache.Data(np.asarray(x), name="x_tiers")), params


def main() -> None:
    mode = sys.argv[1]
    loss, params = _loss()
    tol = peers.iminuit_tol(0.5)
    if mode.startswith("eager"):
        zcache.set_graph_mode(False)
    if mode.startswith(("eager", "traced")):
        # HESSE and MIGRAD's seed by central differences of exact gradients (the cheap tier's Hessian),
        # not by a traced second-order autodiff program
        from zcache._fitting.loss_programs import LossPrograms

        exact_hessian_at = LossPrograms.hessian_at
        LossPrograms.hessian_at = lambda self, x, params, exact: exact_hessian_at(self, x, params, False)
    if mode.startswith("once-"):
        t0, c0 = time.perf_counter(), time.process_time()
        _ONCE.update(wall=t0, cpu=c0)
        result = Minuit(tol=tol, tiered=mode == "once-tiered").minimize(loss)
        print(json.dumps({"mode": mode, "wall_s": round(time.perf_counter() - t0, 4),
                          "cpu_s": round(time.process_time() - c0, 4), "path": result.path,
                          "valid": bool(result.valid), "fmin": float(result.fmin)}), flush=True)
        return
    bg_end: list[float] = []
    thread = None
    t0, c0 = time.perf_counter(), time.process_time()
    if mode.endswith("+bg"):
        from zcache._fitting.compiled_fit import CompiledFit

        fit = CompiledFit.of(loss, list(loss.params))
        work = fit.builder(np.array([float(p) for p in loss.params]), jit=False, structured_hessian="auto")

        def build() -> None:
            work()
            bg_end.append(time.perf_counter() - t0)

        thread = threading.Thread(target=build, daemon=True)
        thread.start()
    options = {"compiled": mode in ("compiled", "default"), "tiered": mode == "default"}
    result = Minuit(tol=tol, **options).minimize(loss)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if thread is not None:
        thread.join()
    out = {"mode": mode, "wall_s": round(wall, 4), "cpu_s": round(cpu, 4), "path": result.path,
           "valid": bool(result.valid), "fmin": float(result.fmin), "nfcn": result.nfcn,
           "values": {k: float(v) for k, v in result.values.items()},
           "errors": {k: float(v) for k, v in result.errors.items()}}
    if bg_end:
        out["bg_s"] = round(bg_end[0], 4)
    # HESSE alone at the minimum, by central differences of exact gradients (the cheap tier's; no new trace)
    obj = loss.objective(None, precompute=True, keep_floating=False, who="Minuit")
    best = np.array([result.values[n] for n in obj.names])
    obj.value(best)
    t1, c1 = time.perf_counter(), time.process_time()
    loss.hessian_at(best, obj.params, exact=False)
    out["hesse_s"], out["hesse_cpu_s"] = round(time.perf_counter() - t1, 4), round(time.process_time() - c1, 4)
    # the next fit from the start (warm, whatever tier is ready now)
    zcache.set_values(list(params.values()), [peers.FIT50K.start[p] for p in params])
    t2 = time.perf_counter()
    second = Minuit(tol=tol, **options).minimize(loss)
    out["second_s"] = round(time.perf_counter() - t2, 4)
    out["second_path"] = second.path
    zcache.set_values(list(params.values()), [peers.FIT50K.start[p] for p in params])
    t3 = time.perf_counter()
    Minuit(tol=tol, **options).minimize(loss)
    out["third_s"] = round(time.perf_counter() - t3, 4)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
