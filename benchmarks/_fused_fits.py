"""Bridged fits with fused line shapes against unfused ones: first fit, warm fit, peak memory.

``python benchmarks/_fused_fits.py [jpsi dzero] [--events N]``: for each model of ``bench_symbolic``
(1e5 data + 1e5 phase-space events by default) and each scenario (``couplings``: the couplings
free; ``all``: masses and widths too), a fresh child process per variant (``SymbolicModel``
``fused=False`` and ``fused=True``, alternating) builds the bridged model, makes its first value +
gradient call, runs the first fit and a warm fit (``Minuit()``, the compiled fit, from the same
start), and reports the times, the minimum and its peak resident set (``VmHWM``). Not in
``make bench``; ``RESULTS.md``, "Fused line shapes: fits".
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MARK = "FUSED-FIT "


def _child(key: str, events: str, names: str, variant: str) -> dict:
    sys.path.insert(0, str(HERE))
    import _rss_fit as rss
    import bench_symbolic as bench

    model, expression, phsp, data, free = rss.read_inputs(key, events, names)
    baseline = rss.current_rss_mib()
    t0 = time.perf_counter()
    zc = bench.ZcacheFit(model, expression, phsp, data, free, f"{key}_{variant}", fused=variant == "fused")
    first = zc.fit()
    first_total = time.perf_counter() - t0
    warm = zc.fit()
    return {"build_s": zc.build_s, "first_call_s": zc.first_call_s, "first_fit_s": first["seconds"],
            "build_to_fit_end_s": first_total, "warm_fit_s": warm["seconds"], "valid": bool(warm["valid"]),
            "path": warm["path"], "fmin": warm["fmin"], "calls": [warm["nfcn"], warm["ngrad"], warm["nhessian"]],
            "peak_mib": rss.peak_rss_mib(), "baseline_mib": baseline}


def main() -> None:
    sys.path.insert(0, str(HERE))
    import _rss_fit as rss
    import bench_symbolic as bench

    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(float(sys.argv[sys.argv.index("--events") + 1])) if "--events" in sys.argv else 100_000
    keys = [a for a in args if a in bench.SPECS] or ["jpsi", "dzero"]
    cfg = bench.Config(n_data=n, n_phsp=n, repeats=1)
    env = rss.child_env()
    for key in keys:
        sample = bench.make_sample(key, cfg, tw_ok=False)
        for scenario in ("couplings", "all"):
            with tempfile.TemporaryDirectory() as tmp:
                events, names = rss.write_inputs(Path(tmp), sample.phsp, sample.data,
                                                 [s.name for s in sample.free(scenario)])
                for variant in ("plain", "fused"):
                    proc = subprocess.run([sys.executable, __file__, "--child", key, str(events), str(names), variant],
                                          capture_output=True, text=True, env=env)
                    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
                    if proc.returncode or not lines:
                        print(key, scenario, variant, "FAILED", proc.stderr[-2000:], flush=True)
                        continue
                    out = json.loads(lines[-1][len(MARK):])
                    print(f"{key} {scenario} {variant} n={n}: " + json.dumps(out), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(MARK + json.dumps(_child(*sys.argv[2:6])), flush=True)
    else:
        main()
