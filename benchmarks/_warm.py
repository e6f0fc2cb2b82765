"""Issue 54's warm targets, reduced: a user's serial toy loop (10k) and the warm 50k fit, against numpy + iminuit.

Interleaved in one process, wall and CPU seconds per fit, medians and paired ratios to numpy + iminuit
(Minuit's numerical gradient, MIGRAD + HESSE), as tables 1 and 2b of ``bench_fit``. ``--profile``: cProfile of
the zcache toy loop and warm fit instead (top functions by cumulative and own time); ``--jit``: also the same loops
under ``set_jit_mode('auto')`` (their first call timed apart).

Run from the repository root: ``python benchmarks/_warm.py [--toys 60] [--fits 15] [--jit] [--profile]``.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

import numpy as np

import zcache

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _peers_fit as peers  # noqa: E402
import bench_fit  # noqa: E402


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


class _Zloop:
    def __init__(self, x0: np.ndarray, setup: peers.GaussExpSetup, jit: bool) -> None:
        self.inner = bench_fit._ZcacheLoop(x0, setup, compiled=True, name="zcache")
        self.jit = jit
        self.name = "zcache default" + (" + XLA" if jit else "")

    def toy(self, x: np.ndarray) -> peers.FitRecord:
        with zcache.set_jit_mode("auto" if self.jit else False):
            return self.inner.toy(x)


class _Zfit:
    def __init__(self, x: np.ndarray, setup: peers.GaussExpSetup, jit: bool) -> None:
        self.inner = bench_fit.ZcacheFitter(x, setup, jit=jit)
        self.name = self.inner.name

    def toy(self, x: np.ndarray) -> peers.FitRecord:
        del x
        return self.inner.fit()


class _Nfit:
    def __init__(self, x: np.ndarray, setup: peers.GaussExpSetup) -> None:
        self.fitter = peers.NumpyFitter(x, setup, gradient=False, hesse=True)
        self.name, self.setup = "numpy + iminuit", setup

    def toy(self, x: np.ndarray | None) -> peers.FitRecord:
        if x is not None:
            self.fitter.set_data(x)
        return self.fitter.fit(self.setup.start)


def _interleaved(runners: list, inputs: list) -> list[tuple[np.ndarray, np.ndarray, list]]:
    wall = [[] for _ in runners]
    cpu = [[] for _ in runners]
    recs = [[] for _ in runners]
    for t, x in enumerate(inputs):
        k = t % len(runners)
        for i in list(range(k, len(runners))) + list(range(k)):
            w0, c0 = _clock()
            rec = runners[i].toy(x)
            w1, c1 = _clock()
            wall[i].append(w1 - w0)
            cpu[i].append(c1 - c0)
            recs[i].append(rec)
    return [(np.array(w), np.array(c), r) for w, c, r in zip(wall, cpu, recs, strict=True)]


def _report(title: str, runners: list, out: list, first: list[float]) -> None:
    print(f"\n{title}")
    base_w, base_c = out[0][0], out[0][1]
    for runner, (w, c, recs), f in zip(runners, out, first, strict=True):
        rw = np.median(w) / np.median(base_w)
        rc = np.median(c) / np.median(base_c)
        q = np.percentile(w / base_w, [25, 75])
        nf = np.median([r.nfcn for r in recs])
        print(f"  {runner.name:32s} first {f * 1e3:8.1f} ms  wall {np.median(w) * 1e3:7.2f} ms  cpu "
              f"{np.median(c) * 1e3:7.2f} ms  ratio wall {rw:.3f} [{q[0]:.2f}-{q[1]:.2f}] cpu {rc:.3f}  nfcn {nf:g} "
              f"valid {sum(r.valid for r in recs)}/{len(recs)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toys", type=int, default=60)
    parser.add_argument("--fits", type=int, default=15)
    parser.add_argument("--jit", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--only", default="loop,fit")
    args = parser.parse_args()
    loop_setup, fit_setup = peers.TOY10K, peers.FIT50K
    rng = np.random.default_rng(loop_setup.seed)
    toys = [peers.generate(loop_setup, rng, loop_setup.n_events) for _ in range(args.toys + 1)]
    x50 = peers.dataset(fit_setup)
    jits = [False, True] if args.jit else [False]
    if "loop" in args.only:
        runners = [_Nfit(toys[0], loop_setup)] + [_Zloop(toys[0], loop_setup, j) for j in jits]
        first = []
        for r in runners:
            w0, _ = _clock()
            r.toy(toys[0])
            first.append(time.perf_counter() - w0)
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            for x in toys[1:]:
                runners[1].toy(x)
            prof.disable()
            _stats(prof, args.toys)
        else:
            _report(f"toy loop, {loop_setup.n_events} events, {args.toys} toys", runners,
                    _interleaved(runners, toys[1:]), first)
    if "fit" in args.only:
        runners = [_Nfit(x50, fit_setup)] + [_Zfit(x50, fit_setup, j) for j in jits]
        first = []
        for r in runners:
            w0, _ = _clock()
            r.toy(None)
            first.append(time.perf_counter() - w0)
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.fits):
                runners[1].toy(None)
            prof.disable()
            _stats(prof, args.fits)
        else:
            _report(f"warm fit, {fit_setup.n_events} events, {args.fits} fits", runners,
                    _interleaved(runners, [None] * args.fits), first)


def _stats(prof: cProfile.Profile, n: int) -> None:
    stats = pstats.Stats(prof)
    print(f"(per fit: divide by {n})")
    stats.sort_stats("cumulative").print_stats(45)
    stats.sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
