"""A CLs upper limit by toys (issue 52): zcache's ToyCalculator against the loops others write.

An extended Gauss + Exponential fit of 1,000 events (the shapes of :data:`_peers_fit.TOY10K`,
yields scaled: ``nsig`` is the POI, ``nbkg`` and the slope ``lam`` are nuisance parameters,
the peak's mass and width fixed); 20 tested signal yields x 2,000 toys per hypothesis: 40,000
toys of the tested values, each fitted with the POI pinned and free, and 2,000 background-only
toys fitted free once and pinned at each tested value (the pinned fits of 40,000 toys).

1. **zcache** ``ToyCalculator(batch=B).p_values(values)``: the first call (tracing and XLA
   compilation of the batched programs and its own fits) and a warm one (another seed: the same
   programs, new toys). Goal: <= 2 minutes warm on this 2-core machine.
2. **numpy + iminuit**: the toy loop an analyst writes by hand (numpy generation, the analytic
   NLL and gradient of ``_peers_fit.GaussExpNLL``, MIGRAD pinned and free per toy); a few hundred
   toys timed and scaled to the study. Goal: zcache >= 5x faster.
3. **hepstats' FrequentistCalculator with zfit** (only in ``.venv-bench``, ``make bench``): a few
   toys timed and scaled. Goal: zcache >= 100x faster. Elsewhere the row says it was not measured.
4. **Dask**: the same study on a two-worker ``LocalCluster`` (``client=``, ``factory=``).

Every figure is printed with the 1-minute load average (``uptime``) of when it was taken: this
machine is shared. Run ``python benchmarks/bench_inference.py [--quick]`` or ``run_all.py``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import functools  # noqa: E402
import math  # noqa: E402
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

#: Goals: warm study <= 2 min; >= 5x numpy + iminuit; >= 100x hepstats + zfit.
TARGET_S = 120.0
TARGET_VS_NUMPY = 5.0
TARGET_VS_HEPSTATS = 100.0
LOW, HIGH = -5.0, 10.0
TRUTH = {"mu": 1.0, "sigma": 0.6, "lam": -0.25, "nsig": 0.0, "nbkg": 1000.0}
VALUES = np.linspace(5.0, 100.0, 20)


def load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def build(seed: int = 0) -> Any:
    """zcache's loss on the observed data (module level: Dask pickles it)."""
    import zcache
    from zcache.loss import ExtendedUnbinnedNLL
    from zcache.models import Exponential, Gaussian, Space, SumPdf

    space = Space("x", LOW, HIGH)
    p = {n: zcache.Parameter(f"inf_{n}", v, *peers.TOY10K.limits[n]) for n, v in TRUTH.items()}
    p["mu"].floating = p["sigma"].floating = False
    p["nsig"] = zcache.Parameter("inf_nsig", 0.0, lower=0.0, upper=500.0)
    model = SumPdf([Gaussian(space, p["mu"], p["sigma"]), Exponential(space, p["lam"])], yields=[p["nsig"], p["nbkg"]])
    x = _observed(seed)
    return ExtendedUnbinnedNLL(model, zcache.Data(x, obs="x"))


def _observed(seed: int) -> np.ndarray:
    rng = np.random.default_rng(1000 + seed)
    return peers._sample_exp(rng, int(TRUTH["nbkg"]), TRUTH["lam"], LOW, HIGH)


# -- 1. zcache ---------------------------------------------------------------------------------
def bench_zcache(n_toys: int, values: np.ndarray, batch: int, client: Any = None) -> dict[str, Any]:
    from zcache.inference import ToyCalculator

    loss = build()
    factory = functools.partial(build) if client is not None else None
    out: dict[str, Any] = {}
    for label, seed in (("first", 1), ("warm", 2)):
        before = load()
        t0 = time.perf_counter()
        calc = ToyCalculator(loss, "inf_nsig", n_toys=n_toys, seed=seed, batch=batch, client=client, factory=factory)
        pv = calc.p_values(values)
        out[f"{label}_s"] = time.perf_counter() - t0
        out[f"{label}_load"] = max(before, load())
        table = calc.toys.table
        out["refit"] = int(table["refit"].sum())
        out["valid"] = float(table["valid"].mean())
        out["cls"] = pv.cls
    return out


# -- 2. numpy + iminuit ------------------------------------------------------------------------
def numpy_loop(n_toys: int, values: np.ndarray, seed: int = 3) -> dict[str, Any]:
    """Toys by hand: numpy generation at the profiled point, MIGRAD pinned and free per toy."""
    import iminuit

    rng = np.random.default_rng(seed)
    names = ["mu", "sigma", "lam", "nsig", "nbkg"]
    limits = [peers.TOY10K.limits[n] for n in names]
    limits[3] = (0.0, 500.0)

    def fit(x: np.ndarray, start: dict[str, float], pinned: float | None) -> tuple[float, float]:
        nll = peers.GaussExpNLL(x, LOW, HIGH)
        m = iminuit.Minuit(nll, np.array([start[n] for n in names]), grad=nll.grad, name=names)
        m.tol = peers.iminuit_tol(0.5)
        m.limits = limits
        m.fixed["mu"] = m.fixed["sigma"] = True
        if pinned is not None:
            m.values["nsig"] = pinned
            m.fixed["nsig"] = True
        m.migrad()
        return float(m.fval), float(m.values["nsig"])

    x_obs = _observed(0)
    profiled = {}
    for v in values:  # the conditional fits of the observed data: the toys' generating points
        nll = peers.GaussExpNLL(x_obs, LOW, HIGH)
        m = iminuit.Minuit(nll, np.array([TRUTH[n] for n in names[:3]] + [v, TRUTH["nbkg"]]), grad=nll.grad,
                           name=names)
        m.limits = limits
        m.fixed["mu"] = m.fixed["sigma"] = m.fixed["nsig"] = True
        m.migrad()
        profiled[float(v)] = {n: float(m.values[n]) for n in names}
    t0 = time.perf_counter()
    done = 0
    per_value = max(1, n_toys // len(values))
    for v in values:
        point = profiled[float(v)]
        for _ in range(per_value):
            n_sig, n_bkg = rng.poisson(point["nsig"]), rng.poisson(point["nbkg"])
            x = np.concatenate([peers._sample_gauss(rng, n_sig, point["mu"], point["sigma"], LOW, HIGH),
                                peers._sample_exp(rng, n_bkg, point["lam"], LOW, HIGH)])
            fit(x, point, float(v))
            fit(x, point, None)
            done += 1
    seconds = time.perf_counter() - t0
    return {"per_toy_s": seconds / done, "toys": done, "load": load()}


# -- 3. hepstats + zfit ------------------------------------------------------------------------
def hepstats_loop(n_toys: int, values: np.ndarray, full: bool = False) -> dict[str, Any]:
    """hepstats' FrequentistCalculator on zfit's model: a few toys per tested value, timed (``.venv-bench`` only).

    ``full``: the whole ``UpperLimit(...).upperlimit`` (the values must bracket the limit);
    otherwise the calculator's p-values at ``values``, the toys and fits the limit is made of.
    """
    try:
        import zfit
        from hepstats.hypotests import UpperLimit
        from hepstats.hypotests.calculators import FrequentistCalculator
        from hepstats.hypotests.parameters import POI, POIarray
    except ImportError as err:
        return {"status": f"not installed ({err.name}); run in .venv-bench (make .venv-bench/.installed)"}
    obs = zfit.Space("x", limits=(LOW, HIGH))
    mu = zfit.Parameter("hs_mu", TRUTH["mu"], floating=False)
    sigma = zfit.Parameter("hs_sigma", TRUTH["sigma"], floating=False)
    lam = zfit.Parameter("hs_lam", TRUTH["lam"], -2.0, -0.001)
    nsig = zfit.Parameter("hs_nsig", 0.0, 0.0, 500.0)
    nbkg = zfit.Parameter("hs_nbkg", TRUTH["nbkg"], 0.0, 1e6)
    model = zfit.pdf.SumPDF([zfit.pdf.Gauss(mu=mu, sigma=sigma, obs=obs, extended=nsig),
                             zfit.pdf.Exponential(lam=lam, obs=obs, extended=nbkg)])
    data = zfit.Data.from_numpy(obs=obs, array=_observed(0)[:, None])
    loss = zfit.loss.ExtendedUnbinnedNLL(model=model, data=data)
    calc = FrequentistCalculator(loss, zfit.minimize.Minuit(), ntoysnull=n_toys, ntoysalt=n_toys)
    t0 = time.perf_counter()
    if full:
        UpperLimit(calc, POIarray(nsig, values), POI(nsig, 0.0)).upperlimit(alpha=0.05, CLs=True)
    else:
        # The p-values UpperLimit interpolates (its toys and fits); upperlimit() itself refuses a
        # few tested values that do not bracket the limit (POIRangeError).
        calc.pvalue(POIarray(nsig, values), POI(nsig, 0.0), qtilde=True, onesided=True)
    seconds = time.perf_counter() - t0
    toys = 2 * n_toys * len(values)
    return {"per_toy_s": seconds / toys, "toys": toys, "load": load()}


# -- zcache and numpy interleaved ---------------------------------------------------------------
def interleaved(n_toys: int = 512, batch: int = 128, reps: int = 3, numpy_toys: int = 300) -> dict[str, Any]:
    """5 tested values: a warm zcache study and the numpy loop in turns, wall and CPU time, medians.

    The busy shared machine changes speed from minute to minute; taking the two side by side,
    several times, and the process CPU time as well as the wall time, gives a ratio that
    does not follow the load. The numpy loop's time is scaled to the study's toys.
    """
    from zcache.inference import ToyCalculator

    values = VALUES[::4][:5]
    toys = 2 * len(values) * n_toys
    loss = build()
    ToyCalculator(loss, "inf_nsig", n_toys=n_toys, seed=1, batch=batch).p_values(values)  # traces, compiles
    runs = []
    for r in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        ToyCalculator(loss, "inf_nsig", n_toys=n_toys, seed=2 + r, batch=batch).p_values(values)
        z = time.perf_counter() - t0, time.process_time() - c0
        t0, c0 = time.perf_counter(), time.process_time()
        done = numpy_loop(numpy_toys, values, seed=3 + r)["toys"]
        npy = (time.perf_counter() - t0) * toys / done, (time.process_time() - c0) * toys / done
        runs.append((*z, *npy, load()))
        print(f"run {r}: zcache {z[0]:.2f} s (CPU {z[1]:.2f} s), numpy + iminuit {npy[0]:.2f} s (CPU {npy[1]:.2f} s), "
              f"load {load():.1f}", file=sys.stderr, flush=True)
    zw, zc, nw, nc, loads = (np.median(c) for c in zip(*runs, strict=True))
    return {"zcache_s": zw, "zcache_cpu_s": zc, "numpy_s": nw, "numpy_cpu_s": nc, "ratio_wall": nw / zw,
            "ratio_cpu": nc / zc, "load": loads}


# -- 4. Dask -----------------------------------------------------------------------------------
def bench_dask(n_toys: int, values: np.ndarray, batch: int, workers: int = 2) -> dict[str, Any]:
    try:
        from distributed import Client
    except ImportError:
        return {"status": "dask.distributed not installed"}
    from zcache.toys import local_cluster

    cluster = local_cluster(workers)
    client = Client(cluster)
    try:
        return bench_zcache(n_toys, values, batch, client=client)
    finally:
        client.close()
        cluster.close()


def run(quick: bool) -> list[tuple[str, str]]:
    """The table (``quick``: a few toys and tested values, no peers, no cluster).

    Parameters
    ----------
    quick : bool
        Smoke-test sizes.

    Returns
    -------
    list of (str, str)
    """
    if quick:
        z = bench_zcache(16, VALUES[:2], 16)
        rows = [{"implementation": "zcache ToyCalculator (quick)", "first call (s)": z["first_s"],
                 "warm (s)": z["warm_s"], "load": z["warm_load"]}]
        return [("Toy upper limit (quick)", markdown_table(rows))]
    return [(f"6. A CLs upper limit by toys: {len(VALUES)} tested values x {N_TOYS:,} toys per hypothesis",
             report(*study()))]


N_TOYS = 2000
BATCH = 128


def study(n_toys: int = N_TOYS, batch: int = BATCH, numpy_toys: int = 200, hepstats_toys: int = 25,
          dask: bool = True) -> tuple[dict[str, Any], ...]:
    """Run every row; each is a dict of numbers (or a status)."""
    z = bench_zcache(n_toys, VALUES, batch)
    print("zcache", {k: v for k, v in z.items() if k != "cls"}, file=sys.stderr, flush=True)
    npy = numpy_loop(numpy_toys, VALUES)
    print("numpy", npy, file=sys.stderr, flush=True)
    hs = hepstats_loop(hepstats_toys, VALUES[:4])
    print("hepstats", hs, file=sys.stderr, flush=True)
    dk = bench_dask(n_toys, VALUES, batch) if dask else {"status": "not run"}
    print("dask", {k: v for k, v in dk.items() if k != "cls"}, file=sys.stderr, flush=True)
    return z, npy, hs, dk, {"n_toys": n_toys, "batch": batch}


def report(z: dict[str, Any], npy: dict[str, Any], hs: dict[str, Any], dk: dict[str, Any],
           meta: dict[str, Any]) -> str:
    n_toys = meta["n_toys"]
    toys = 2 * len(VALUES) * n_toys  # toys of the tested values and background-only toys, per tested value
    rows = [{"implementation": f"zcache ToyCalculator(batch={meta['batch']}), one process", "study (s)": z["warm_s"],
             "first call (s)": z["first_s"], "load (1 min)": z["warm_load"], "this / zcache": 1.0,
             "status": f"valid {z['valid']:.4f}, refits {z['refit']}"}]
    if "per_toy_s" in npy:
        s = npy["per_toy_s"] * toys
        rows.append({"implementation": f"numpy + iminuit loop ({npy['toys']} toys timed, scaled)", "study (s)": s,
                     "load (1 min)": npy["load"], "this / zcache": s / z["warm_s"]})
    if "per_toy_s" in hs:
        s = hs["per_toy_s"] * toys
        rows.append({"implementation": f"hepstats FrequentistCalculator + zfit ({hs['toys']} toys, scaled)",
                     "study (s)": s, "load (1 min)": hs["load"], "this / zcache": s / z["warm_s"]})
    else:
        rows.append({"implementation": "hepstats FrequentistCalculator + zfit", "status": hs.get("status")})
    if "warm_s" in dk:
        rows.append({"implementation": "zcache ToyCalculator on a 2-worker Dask LocalCluster",
                     "study (s)": dk["warm_s"], "first call (s)": dk["first_s"], "load (1 min)": dk["warm_load"],
                     "this / zcache": dk["warm_s"] / z["warm_s"]})
    else:
        rows.append({"implementation": "zcache on Dask", "status": dk.get("status")})
    vs_numpy = rows[1]["this / zcache"] if "per_toy_s" in npy else math.nan
    say = (f"Warm study {z['warm_s']:.0f} s (goal <= {TARGET_S:.0f} s: "
           f"{'met' if z['warm_s'] <= TARGET_S else 'missed'}); {vs_numpy:.1f}x faster than the numpy + iminuit loop "
           f"(goal >= {TARGET_VS_NUMPY:.0f}x: {'met' if vs_numpy >= TARGET_VS_NUMPY else 'missed'}).")
    return markdown_table(rows) + "\n\n**What the numbers say.** " + say


def main() -> None:
    """Print the table (``--quick`` for smoke-test sizes; ``--toys N`` for a smaller study)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--toys", type=int, default=N_TOYS)
    parser.add_argument("--numpy-toys", type=int, default=200)
    parser.add_argument("--hepstats-toys", type=int, default=25, help="toys per hypothesis at 4 tested values")
    parser.add_argument("--no-dask", action="store_true")
    parser.add_argument("--interleaved", action="store_true", help="5 values: zcache and numpy in turns, medians")
    args = parser.parse_args()
    if args.interleaved:
        print(interleaved(args.toys, min(BATCH, args.toys), numpy_toys=args.numpy_toys))
        return
    if args.quick:
        for title, body in run(True):
            print(f"## {title}\n\n{body}")
        return
    print(report(*study(args.toys, min(BATCH, args.toys), args.numpy_toys, args.hepstats_toys,
                        dask=not args.no_dask)))


if __name__ == "__main__":
    main()
