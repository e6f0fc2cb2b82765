"""Profile scans as batched conditional fits (issue 52, part 5) against serial iminuit fits.

The extended Gauss + Exp of ``_peers_fit.TOY10K`` (five free parameters) on 2,000 events:

1. **1-D scan**: 50 values of ``nsig`` over the best fit +- 3 HESSE errors, the other four
   parameters fitted at each: :func:`zcache.inference.profile_scan` (all 50 conditional fits in
   one compiled program, each from the best fit), zcache's serial path (``batched=False``: one
   compiled Minuit fit per point, each from its neighbour's) and the hand-written numpy NLL with
   its analytic gradient fitted point by point by iminuit (MIGRAD, each from its neighbour's, as
   ``mnprofile`` does).
2. **2-D scan**: a 50 x 50 grid of (``nsig``, ``sigma``) over +- 3 errors, the other three fitted:
   :func:`zcache.inference.profile_grid` (2,500 conditional fits, batched) against iminuit point by
   point on the numpy NLL.

zcache's first call (the best fit, tracing and XLA compilation of the batched program, the fits)
is shown beside the warm one (the same call again: the fits only). Every scan's
:math:`-2\\Delta\\ln L` is compared with the numpy reference's (largest difference). Goal: the warm
batched scans >= 5x faster than the serial numpy + iminuit ones.

Run ``python benchmarks/bench_scans.py [--quick]`` or ``run_all.py``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import _peers_fit as peers  # noqa: E402
from _harness import markdown_table  # noqa: E402

#: Goal: warm batched scans at least this many times faster than serial numpy + iminuit.
TARGET = 5.0
SETUP = peers.TOY10K
NAMES = peers.PARAMS


def build(n_events: int, seed: int = 52) -> tuple[Any, np.ndarray]:
    """zcache's loss of TOY10K's model on ``n_events`` events drawn by numpy (and the events)."""
    import zcache
    from zcache.loss import ExtendedUnbinnedNLL
    from zcache.models import Exponential, Gaussian, Space, SumPdf

    x = peers.generate(SETUP, np.random.default_rng(seed), n_events)
    space = Space("x", SETUP.low, SETUP.high)
    scale = n_events / SETUP.n_events
    truth = {**SETUP.truth, "nsig": SETUP.truth["nsig"] * scale, "nbkg": SETUP.truth["nbkg"] * scale}
    p = {n: zcache.Parameter(f"{n}_bs", truth[n], *SETUP.limits[n]) for n in NAMES}
    model = SumPdf([Gaussian(space, p["mu"], p["sigma"]), Exponential(space, p["lam"])], yields=[p["nsig"], p["nbkg"]])
    return ExtendedUnbinnedNLL(model, zcache.Data(x, obs="x")), x


class _NumpyProfile:
    """Conditional fits of the numpy NLL (analytic gradient) by iminuit, point by point."""

    def __init__(self, x: np.ndarray, best: dict[str, float], gradient: bool = True) -> None:
        from iminuit import Minuit

        self.nll = nll = peers.GaussExpNLL(x, SETUP.low, SETUP.high)
        if gradient:
            self.m = Minuit(nll, [best[n] for n in NAMES], grad=nll.grad, name=NAMES)
        else:  # a plain function: Minuit differentiates numerically
            self.m = Minuit(lambda p: nll(p), [best[n] for n in NAMES], name=NAMES)
            self.m.errordef = 0.5
        self.m.tol = 0.1  # iminuit's default, as zcache's Minuit: EDM < 0.002 tol errordef
        self.m.limits = [SETUP.limits[n] for n in NAMES]
        self.m.migrad()
        self.fmin = float(self.m.fval)
        self.best = {n: float(self.m.values[n]) for n in NAMES}

    def scan(self, held: dict[str, np.ndarray], chains: list[list[int]]) -> np.ndarray:
        """-2 Delta ln L at each row of ``held`` (name -> values), fitted along ``chains``."""
        m = self.m
        rows = len(next(iter(held.values())))
        delta = np.full(rows, np.nan)
        for n in held:
            m.fixed[n] = True
        try:
            for chain in chains:
                for n in NAMES:
                    m.values[n] = self.best[n]
                for i in chain:
                    for n, v in held.items():
                        m.values[n] = v[i]
                    m.migrad()
                    delta[i] = (m.fval - self.fmin) / 0.5
        finally:
            for n in held:
                m.fixed[n] = False
        return delta


def _outwards(values: np.ndarray, best: float) -> list[list[int]]:
    up = [int(i) for i in np.argsort(values) if values[i] >= best]
    down = [int(i) for i in np.argsort(values)[::-1] if values[i] < best]
    return [c for c in (up, down) if c]


def _timed(fn: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def bench(n_events: int, points_1d: int, grid: int | None, serial_1d: bool = True) -> list[dict[str, Any]]:
    """The rows of the table."""
    from zcache.inference import profile_grid, profile_scan

    loss, x = build(n_events)
    rows = []
    # 1-D: nsig over +-3 errors
    first, t_first = _timed(lambda: profile_scan(loss, "nsig_bs", bins=points_1d, bound=3.0))
    scan, t_warm = _timed(lambda: profile_scan(loss, "nsig_bs", first.values))
    ref = _NumpyProfile(x, {n: first.best[f"{n}_bs"] for n in NAMES})
    ref_delta, t_ref = _timed(lambda: ref.scan({"nsig": first.values}, _outwards(first.values, ref.best["nsig"])))
    rows.append({"scan": f"1-D, {points_1d} points of nsig", "implementation": "zcache profile_scan (batched)",
                 "first call (s)": t_first, "warm (s)": t_warm, "per point warm (ms)": 1e3 * t_warm / points_1d,
                 "numpy+iminuit / this (warm)": t_ref / t_warm,
                 "max |Delta - numpy|": float(np.max(np.abs(scan.delta - ref_delta))),
                 "converged": f"{int(scan.converged.sum())}/{points_1d}", "refits": int(scan.refit.sum())})
    if serial_1d:
        serial, t_serial_first = _timed(lambda: profile_scan(loss, "nsig_bs", first.values, batched=False))
        serial, t_serial = _timed(lambda: profile_scan(loss, "nsig_bs", first.values, batched=False))
        rows.append({"scan": f"1-D, {points_1d} points of nsig", "implementation": "zcache profile_scan(batched=False)",
                     "first call (s)": t_serial_first, "warm (s)": t_serial,
                     "per point warm (ms)": 1e3 * t_serial / points_1d, "numpy+iminuit / this (warm)": t_ref / t_serial,
                     "max |Delta - numpy|": float(np.max(np.abs(serial.delta - ref_delta))),
                     "converged": f"{int(serial.converged.sum())}/{points_1d}", "refits": 0})
    rows.append({"scan": f"1-D, {points_1d} points of nsig", "implementation": "numpy NLL + iminuit, point by point",
                 "first call (s)": t_ref, "warm (s)": t_ref, "per point warm (ms)": 1e3 * t_ref / points_1d,
                 "numpy+iminuit / this (warm)": 1.0, "max |Delta - numpy|": 0.0, "converged": "", "refits": ""})
    numerical = _NumpyProfile(x, {n: first.best[f"{n}_bs"] for n in NAMES}, gradient=False)
    num_delta, t_num = _timed(lambda: numerical.scan({"nsig": first.values},
                                                     _outwards(first.values, numerical.best["nsig"])))
    rows.append({"scan": f"1-D, {points_1d} points of nsig",
                 "implementation": "numpy NLL + iminuit (numerical gradient), point by point",
                 "first call (s)": t_num, "warm (s)": t_num, "per point warm (ms)": 1e3 * t_num / points_1d,
                 "numpy+iminuit / this (warm)": t_ref / t_num,
                 "max |Delta - numpy|": float(np.max(np.abs(num_delta - ref_delta))), "converged": "", "refits": ""})
    if grid is None:
        return rows
    # 2-D: (nsig, sigma) over +-3 errors on a grid
    err = {n: first.error if n == "nsig" else float(np.sqrt(_sigma_var(ref))) for n in ("nsig", "sigma")}
    gx = ref.best["nsig"] + 3.0 * err["nsig"] * np.linspace(-1.0, 1.0, grid)
    gy = np.clip(ref.best["sigma"] + 3.0 * err["sigma"] * np.linspace(-1.0, 1.0, grid), *SETUP.limits["sigma"])
    g_first, t2_first = _timed(lambda: profile_grid(loss, ("nsig_bs", "sigma_bs"), gx, gy))
    g, t2_warm = _timed(lambda: profile_grid(loss, ("nsig_bs", "sigma_bs"), gx, gy))
    hx, hy = np.meshgrid(gx, gy, indexing="ij")
    ref2, t2_ref = _timed(lambda: ref.scan({"nsig": hx.ravel(), "sigma": hy.ravel()},
                                           [list(range(i * grid, (i + 1) * grid)) for i in range(grid)]))
    n2 = grid * grid
    rows.append({"scan": f"2-D, {grid} x {grid} grid of (nsig, sigma)", "implementation": "zcache profile_grid (batched)",
                 "first call (s)": t2_first, "warm (s)": t2_warm, "per point warm (ms)": 1e3 * t2_warm / n2,
                 "numpy+iminuit / this (warm)": t2_ref / t2_warm,
                 "max |Delta - numpy|": float(np.max(np.abs(g.delta.ravel() - ref2))),
                 "converged": f"{int(g.converged.sum())}/{n2}", "refits": int(g.refit.sum())})
    rows.append({"scan": f"2-D, {grid} x {grid} grid of (nsig, sigma)", "implementation": "numpy NLL + iminuit, point by point",
                 "first call (s)": t2_ref, "warm (s)": t2_ref, "per point warm (ms)": 1e3 * t2_ref / n2,
                 "numpy+iminuit / this (warm)": 1.0, "max |Delta - numpy|": 0.0, "converged": "", "refits": ""})
    return rows


def _sigma_var(ref: _NumpyProfile) -> float:
    ref.m.hesse()
    return float(ref.m.covariance["sigma", "sigma"])


def _say(rows: list[dict[str, Any]]) -> str:
    parts = []
    for row in rows:
        if row["implementation"].endswith("(batched)"):
            ratio = row["numpy+iminuit / this (warm)"]
            parts.append(f"{row['scan']}: the batched scan is {ratio:.1f}x faster warm than numpy + iminuit point by "
                         f"point (goal >= {TARGET:g}x: {'met' if ratio >= TARGET else '**missed**'}); its first call "
                         f"takes {row['first call (s)']:.1f} s (tracing, XLA compilation, the best fit), its "
                         f"-2 Delta ln L agrees with the reference's to {row['max |Delta - numpy|']:.1g}.")
    return " ".join(parts)


def run(quick: bool) -> list[tuple[str, str]]:
    """The table (``quick``: 300 events, the 1-D scan of 5 points only).

    Parameters
    ----------
    quick : bool
        Smoke-test sizes.

    Returns
    -------
    list of (str, str)
    """
    if quick:
        rows = bench(n_events=300, points_1d=5, grid=None, serial_1d=False)
        title = "Profile scans (quick)"
    else:
        rows = bench(n_events=2_000, points_1d=50, grid=50)
        title = "Profile scans: batched conditional fits against iminuit point by point (2,000 events)"
    return [(title, markdown_table(rows) + "\n\n**What the numbers say.** " + _say(rows))]


def main() -> None:
    """Print the table (``--quick`` for smoke-test sizes)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    for title, body in run(args.quick):
        print(f"### {title}\n\n{body}\n")


if __name__ == "__main__":
    main()
