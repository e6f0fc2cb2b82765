"""bench_scans' 2-D grid measured in CPU time, and where its time goes (issue 52, branch h-scan2).

On a shared machine wall times move with the load; a process's CPU time much less. Three modes:

- ``side``: ``bench_scans.bench(2000, 50, 50, serial_1d=False)`` with every timed step's wall and process
  CPU time, one JSON line (run it for two trees in turn, ``PYTHONPATH`` set to each, for a before/after).
- ``profile``: the warm 50 x 50 ``profile_grid`` under cProfile, with each pass's rows, evaluations and CPU.
- ``reference``: the numpy + iminuit grid with its value and gradient calls counted.

Run ``PYTHONPATH=. python benchmarks/_scans_cpu.py side|profile|reference [LABEL]``.
"""

from __future__ import annotations

import cProfile
import json
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import _peers_fit as peers  # noqa: E402
import bench_scans as bench  # noqa: E402

STEPS = ["1d_first", "1d_warm", "1d_ref", "1d_numgrad", "2d_first", "2d_warm", "2d_ref"]


def side(label: str) -> dict[str, Any]:
    """bench_scans' numbers with each step's wall and CPU seconds (the steps in ``STEPS`` order)."""
    log = []

    def timed(fn: Any) -> tuple[Any, float]:
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall = time.perf_counter() - t0
        log.append((wall, time.process_time() - c0))
        return out, wall

    bench._timed = timed
    rows = bench.bench(n_events=2_000, points_1d=50, grid=50, serial_1d=False)
    steps = {n: {"wall": w, "cpu": c} for n, (w, c) in zip(STEPS, log, strict=True)}
    return {"label": label, "steps": steps,
            "cpu ratio 2-D": steps["2d_ref"]["cpu"] / steps["2d_warm"]["cpu"],
            "cpu ratio 1-D": steps["1d_ref"]["cpu"] / steps["1d_warm"]["cpu"],
            "rows": [{k: v if isinstance(v, (str, int)) else float(v) for k, v in r.items()} for r in rows]}


def _grid() -> tuple[Any, Any, np.ndarray, np.ndarray]:
    from zcache.inference import profile_scan

    loss, x = bench.build(2_000)
    first = profile_scan(loss, "nsig_bs", bins=50, bound=3.0)
    ref = bench._NumpyProfile(x, {n: first.best[f"{n}_bs"] for n in bench.NAMES})
    err_sigma = float(np.sqrt(bench._sigma_var(ref)))
    gx = ref.best["nsig"] + 3.0 * first.error * np.linspace(-1.0, 1.0, 50)
    gy = np.clip(ref.best["sigma"] + 3.0 * err_sigma * np.linspace(-1.0, 1.0, 50), *bench.SETUP.limits["sigma"])
    return loss, ref, gx, gy


def profile() -> None:
    """The warm grid under cProfile; each pass of ``BatchedLoss.scan_fits``: rows, maxiter, evaluations, CPU."""
    from zcache.inference import profile_grid
    from zcache.scale import BatchedLoss

    loss, _, gx, gy = _grid()
    profile_grid(loss, ("nsig_bs", "sigma_bs"), gx, gy)
    calls = []
    scan_fits = BatchedLoss.scan_fits

    def spy(self: Any, start: Any, *args: Any, **kwargs: Any) -> Any:
        c0 = time.process_time()
        out = scan_fits(self, start, *args, **kwargs)
        calls.append((len(start), kwargs.get("maxiter", 200), out.nfcn.copy(), time.process_time() - c0))
        return out

    BatchedLoss.scan_fits = spy
    prof = cProfile.Profile()
    c0 = time.process_time()
    prof.enable()
    profile_grid(loss, ("nsig_bs", "sigma_bs"), gx, gy)
    prof.disable()
    BatchedLoss.scan_fits = scan_fits
    nfcn = np.concatenate([c[2] for c in calls])
    print(f"CPU {time.process_time() - c0:.3f} s, evaluations per point: mean {nfcn.mean():.2f}; passes "
          f"(rows, maxiter, mean evaluations, CPU s): {[(r, m, round(float(n.mean()), 2), round(t, 3)) for r, m, n, t in calls]}")
    pstats.Stats(prof).sort_stats("tottime").print_stats(15)


def reference() -> None:
    """numpy + iminuit on the same grid: CPU time and value / gradient calls per point."""
    count = {"value": 0, "gradient": 0}
    value, gradient = peers.GaussExpNLL.__call__, peers.GaussExpNLL.grad

    def counted_value(self: Any, p: np.ndarray) -> float:
        count["value"] += 1
        return value(self, p)

    def counted_gradient(self: Any, p: np.ndarray) -> np.ndarray:
        count["gradient"] += 1
        return gradient(self, p)

    # counted from the start: iminuit holds the bound gradient it was given
    peers.GaussExpNLL.__call__, peers.GaussExpNLL.grad = counted_value, counted_gradient
    try:
        _, ref, gx, gy = _grid()
        p = np.array([ref.best[n] for n in bench.NAMES])
        c0 = time.process_time()
        for _ in range(1000):
            value(ref.nll, p), gradient(ref.nll, p)
        print(f"one numpy value + gradient: {(time.process_time() - c0) * 1e3:.1f} µs CPU")
        count["value"] = count["gradient"] = 0
        hx, hy = np.meshgrid(gx, gy, indexing="ij")
        c0 = time.process_time()
        ref.scan({"nsig": hx.ravel(), "sigma": hy.ravel()}, [list(range(i * 50, (i + 1) * 50)) for i in range(50)])
        cpu = time.process_time() - c0
    finally:
        peers.GaussExpNLL.__call__, peers.GaussExpNLL.grad = value, gradient
    print(f"grid CPU {cpu:.3f} s; per point {count['value'] / 2500:.2f} values, {count['gradient'] / 2500:.2f} gradients")


def main() -> None:
    """Run the mode named on the command line."""
    mode = sys.argv[1] if len(sys.argv) > 1 else "side"
    if mode == "side":
        print(json.dumps(side(sys.argv[2] if len(sys.argv) > 2 else "")))
    elif mode == "profile":
        profile()
    else:
        reference()


if __name__ == "__main__":
    main()
