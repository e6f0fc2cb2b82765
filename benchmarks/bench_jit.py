"""XLA-compiled zcache functions (``zcache.set_jit_mode``) against the uncompiled graphs.

The extended Gauss + Exponential fit of ``bench_fit`` (5 free parameters), at 10k and 50k
events, jit off (``False``) and on (``'auto'``: the loss functions compiled):

===========================  ==============================================================
first call                   ``value_gradient_at`` on a new loss: trace (+ XLA compile)
first fit                    the first ``Minuit().minimize`` after it (traces, compiles
                             ``value_at`` and ``hessian_at``)
per call                     ``value_gradient_at`` at alternating points, median of repeats
fit                          a warm ``Minuit().minimize`` from the same start, median
new number of events         after ``set_data`` to N + 1 events: the next two calls
                             (XLA compiles per shape; a cache of per-event values that
                             changes shape is stored by one uncompiled call first)
===========================  ==============================================================

Modes are interleaved repeat by repeat (off, on, off, on, ...) so that load changes hit
both. Run ``python benchmarks/bench_jit.py [--quick]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import zcache  # noqa: E402
from zcache.loss import ExtendedUnbinnedNLL  # noqa: E402
from zcache.minimize import Minuit  # noqa: E402
from zcache.models import Exponential, Gaussian, Space, SumPdf  # noqa: E402

MODES = (False, "auto")


def _problem(n: int, seed: int = 1):
    space = Space("x", 0.0, 10.0)
    mu = zcache.Parameter("mu", 5.0, lower=3.0, upper=7.0)
    sigma = zcache.Parameter("sigma", 0.5, lower=0.05, upper=2.0)
    lam = zcache.Parameter("lam", -0.3, lower=-2.0, upper=-0.01)
    nsig = zcache.Parameter("nsig", 0.3 * n, lower=0.0, upper=1e7)
    nbkg = zcache.Parameter("nbkg", 0.7 * n, lower=0.0, upper=1e7)
    model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[nsig, nbkg])
    rng = np.random.default_rng(seed)
    x = np.r_[rng.normal(5.2, 0.45, int(0.3 * n)), rng.exponential(1 / 0.25, 3 * n)]
    x = x[(x > 0.0) & (x < 10.0)][:n]
    data = zcache.Data(x, name="x")
    return model, data


def _per_call(loss, params, x0, calls: int) -> float:
    xs = [x0, x0 * (1 + 1e-6)]
    loss.value_gradient_at(xs[0], params, offset=0.0)
    loss.value_gradient_at(xs[1], params, offset=0.0)
    t = time.perf_counter()
    for i in range(calls):
        loss.value_gradient_at(xs[i & 1], params, offset=0.0)
    return (time.perf_counter() - t) / calls * 1e3


def _timed(f) -> float:
    t = time.perf_counter()
    f()
    return (time.perf_counter() - t) * 1e3


def measure(sizes=(10_000, 50_000), repeats: int = 5, calls: int = 200) -> list[dict]:
    """One row per (N, jit mode): first call, first fit, per call, warm fit, after a new N."""
    rows = []
    for n in sizes:
        losses, datas, start = {}, {}, None
        first, first_fit = {}, {}
        for jit in MODES:
            # a model and loss per mode (the same events): Minuit re-applies precompute when
            # another loss of the same model was fitted last, which drops the traced graphs
            model, datas[jit] = _problem(n)
            loss = ExtendedUnbinnedNLL(model, datas[jit])
            zcache.precompute(loss)
            params = list(loss.params)
            start = start or [float(p) for p in params]
            x0 = np.array(start)
            with zcache.set_jit_mode(jit):
                first[jit] = _timed(lambda loss=loss, params=params, x0=x0: loss.value_gradient_at(x0, params))
                first_fit[jit] = _timed(lambda loss=loss: Minuit().minimize(loss))  # traces value_at, hessian_at
            losses[jit] = loss
        per_call = {jit: [] for jit in MODES}
        fit = {jit: [] for jit in MODES}
        fmin = {}
        for _ in range(repeats):
            for jit in MODES:
                loss = losses[jit]
                params = list(loss.params)
                with zcache.set_jit_mode(jit):
                    per_call[jit].append(_per_call(loss, params, np.array(start), calls))
                    zcache.set_values(params, start)
                    result = {}
                    fit[jit].append(_timed(lambda loss=loss, result=result: result.update(r=Minuit().minimize(loss))))
                    fmin[jit] = result["r"].fmin
        # a new number of events: XLA compiles for the new shape
        reshape = {}
        for jit in MODES:
            loss, data = losses[jit], datas[jit]
            x = data.numpy()
            params = list(loss.params)
            with zcache.set_jit_mode(jit):
                zcache.set_values(params, start)
                data.set_data(np.r_[x, x[:1]])
                x0 = np.array(start)
                a = _timed(lambda loss=loss, params=params, x0=x0: loss.value_gradient_at(x0, params))
                b = _timed(lambda loss=loss, params=params, x0=x0: loss.value_gradient_at(x0 * (1 + 1e-6), params))
                reshape[jit] = (a, b)
                data.set_data(x)
                loss.value_gradient_at(np.array(start), params)
                loss.value_gradient_at(np.array(start), params)
        for jit in MODES:
            rows.append({
                "n": n, "jit": jit, "first_ms": first[jit], "first_fit_ms": first_fit[jit],
                "per_call_ms": float(np.median(per_call[jit])),
                "per_call_iqr": tuple(np.percentile(per_call[jit], [25, 75])),
                "fit_ms": float(np.median(fit[jit])), "fit_iqr": tuple(np.percentile(fit[jit], [25, 75])),
                "reshape_ms": reshape[jit], "fmin": fmin[jit],
            })
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| N | jit | first call (ms) | first fit (ms) | per call (ms, median [IQR]) | Minuit fit (ms, median [IQR]) "
             "| after set_data(N+1): 1st, 2nd call (ms) | fmin |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(
            f"| {r['n']:,} | {r['jit']!s} | {r['first_ms']:.0f} | {r['first_fit_ms']:.0f} | {r['per_call_ms']:.3f} "
            f"[{r['per_call_iqr'][0]:.3f}-{r['per_call_iqr'][1]:.3f}] | {r['fit_ms']:.0f} "
            f"[{r['fit_iqr'][0]:.0f}-{r['fit_iqr'][1]:.0f}] | {r['reshape_ms'][0]:.0f}, "
            f"{r['reshape_ms'][1]:.0f} | {r['fmin']:.6f} |"
        )
    return "\n".join(lines)


def _amplitude_problem(n: int):
    from zcache.amplitude import AmplitudePdf, CoherentSum, ComplexParameter, DalitzKinematics, NonResonant, Resonance

    kin = DalitzKinematics(1.86966, 0.493677, 0.13957039, 0.13957039, names=("K-", "pi+", "pi+"))
    zcache.models.set_seed(5)
    mc, data = kin.sample(n, name="amp_mc"), kin.sample(n, name="amp_data")
    mass = zcache.Parameter("amp_kst_mass", 0.8955, lower=0.85, upper=0.95)
    comps = [(ComplexParameter("amp_c_nr", 1.0, floating=False), NonResonant(kin)),
             (ComplexParameter("amp_c_kst", 0.5 + 0.3j), Resonance(kin, ("12", "13"), mass, 0.047, 1, name="Kst")),
             (ComplexParameter("amp_c_k0", 0.3 - 0.2j), Resonance(kin, ("12", "13"), 1.425, 0.27, 0, name="K0"))]
    from zcache.loss import UnbinnedNLL

    return UnbinnedNLL(AmplitudePdf(CoherentSum(comps), mc), data)


def measure_amplitude(n: int = 100_000, repeats: int = 5, calls: int = 10) -> list[dict]:
    """The Dalitz amplitude loss (NR + K*(892) with a floating mass + K0*(1430)): value+gradient per call."""
    loss = _amplitude_problem(n)
    params = list(loss.params)
    x0 = np.array([float(p) for p in params])
    k_mass = [p.name for p in params].index("amp_kst_mass")
    first, fallback = {}, {}
    for jit in MODES:
        with zcache.set_jit_mode(jit):
            first[jit] = _timed(lambda: [loss.value_gradient_at(x0 * (1 + 1e-9 * i), params) for i in range(2)])
            fallback[jit] = [f.jit_fallback for f in loss.functions() if f.jit_fallback]

    def per_call(move: int) -> float:
        t = time.perf_counter()
        for i in range(calls):
            x = x0.copy()
            x[move] += 1e-4 * (i & 1)
            loss.value_gradient_at(x, params)
        return (time.perf_counter() - t) / calls * 1e3

    times = {(jit, what): [] for jit in MODES for what in ("couplings", "mass")}
    for _ in range(repeats):
        for jit in MODES:
            with zcache.set_jit_mode(jit):
                times[(jit, "couplings")].append(per_call(0))
                times[(jit, "mass")].append(per_call(k_mass))
    return [{"n": n, "jit": jit, "first_ms": first[jit], "fallback": fallback[jit],
             "couplings_ms": float(np.median(times[(jit, "couplings")])),
             "mass_ms": float(np.median(times[(jit, "mass")]))} for jit in MODES]


def amplitude_table(rows: list[dict]) -> str:
    lines = ["| N (data = phase space) | jit | first two calls (ms) | value+gradient, a coupling moves (ms) "
             "| value+gradient, the K* mass moves (ms) | uncompiled because |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['n']:,} | {r['jit']!s} | {r['first_ms']:.0f} | {r['couplings_ms']:.2f} | {r['mass_ms']:.2f} "
                     f"| {'; '.join(r['fallback']) or '—'} |")
    return "\n".join(lines)


def run(quick: bool) -> list[tuple[str, str]]:
    """``run_all``'s entry point: ``(title, markdown body)`` pairs.

    Parameters
    ----------
    quick : bool
        10k events only, 2 repeats, 10 calls (a smoke test: its time is the traces and XLA compiles).
    """
    rows = measure(sizes=(10_000,), repeats=2, calls=10) if quick else measure()
    by = {(r["n"], r["jit"]): r for r in rows}
    ratios = []
    for n in sorted({r["n"] for r in rows}):
        off, on = by[(n, False)], by[(n, "auto")]
        ratios.append(f"N = {n:,}: per call {on['per_call_ms'] / off['per_call_ms']:.2f}x, warm fit "
                      f"{on['fit_ms'] / off['fit_ms']:.2f}x, first fit {on['first_fit_ms'] - off['first_fit_ms']:+.0f} ms "
                      f"(jit 'auto' against off).")
    say = ("Extended Gauss + Exponential, 5 free parameters, precomputed; jit off and 'auto' interleaved "
           "repeat by repeat. " + " ".join(ratios) + " The first fit with XLA pays the compile of value, "
           "value+gradient and Hessian; a new number of events compiles once more (last-but-one column).")
    amp = measure_amplitude(n=2_000, repeats=2, calls=2) if quick else measure_amplitude()
    off, on = amp
    amp_say = (f"Median of interleaved repeats. With XLA a coupling step costs {on['couplings_ms'] / off['couplings_ms']:.2f}x "
               f"and a mass step {on['mass_ms'] / off['mass_ms']:.2f}x the uncompiled call; the caches (amplitude "
               "columns, the K x K integrals) serve both modes.")
    return [("XLA-compiled loss (set_jit_mode) against uncompiled graphs", table(rows) + "\n\n" + say),
            ("XLA-compiled Dalitz amplitude loss", amplitude_table(amp) + "\n\n" + amp_say)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10k events only, 2 repeats")
    args = parser.parse_args(argv)
    for title, body in run(args.quick):
        print(f"### {title}\n\n{body}")


if __name__ == "__main__":
    main()
