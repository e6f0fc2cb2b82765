"""The compiled fit with its Hessians from the loss's structure, against forward differences (issue 26; RESULTS.md).

One fresh process per line (a first fit is a fresh process's), the three settings of
``Minuit(structured_hessian=...)`` alternately (``False``: differences; ``auto``, the default: the
couplings' block exact, differences along the line shapes; ``True``: the whole structured Hessian): the
``bench_symbolic`` models at 1e5 + 1e5 events with every parameter free, build, first value + gradient
call, first fit, then warm fits from the same start; also the Hessian at the minimum both ways.

    PYTHONPATH=. .venv-bench/bin/python benchmarks/_structured_hessian.py jpsi 3     # 3 processes per setting
    PYTHONPATH=. .venv-bench/bin/python benchmarks/_structured_hessian.py --child jpsi 1e5 auto
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def child(key: str, n: int, structured: bool | str) -> dict:
    sys.path.insert(0, HERE)
    import bench_symbolic as bs
    import numpy as np

    from zcache.minimize import Minuit

    bs.Minuit = functools.partial(Minuit, structured_hessian=structured)
    sample = bs.make_sample(key, bs.Config(n_data=n, n_phsp=n, repeats=1), tw_ok=False)
    t0 = time.perf_counter()
    zc = bs.ZcacheFit(sample.model, sample.expression, sample.phsp, sample.data,
                      sorted(s.name for s in sample.free("all")), key)
    first = zc.fit()
    first_total = time.perf_counter() - t0
    warm = [zc.fit() for _ in range(3)]
    params = zc.loss.params
    x = [float(p) for p in params]
    hess = {}
    for how, exact in (("structured", None), ("differences", False)):
        zc.loss.hessian_at(x, params, exact=exact)
        t = time.perf_counter()
        hess[how] = zc.loss.hessian_at(x, params, exact=exact).numpy()
        hess[how + "_s"] = time.perf_counter() - t
    scale = float(np.abs(hess["differences"]).max())
    status = dict(line.split(":", 1) for line in open("/proc/self/status") if line.startswith(("VmHWM", "VmRSS")))
    return {"model": key, "structured": structured, "first_call_s": zc.first_call_s,
            "first_fit_s": first["seconds"], "build_to_first_fit_end_s": first_total,
            "warm_fit_s": float(np.median([w["seconds"] for w in warm])), "nfcn": first["nfcn"],
            "fmin": first["fmin"], "valid": first["valid"] and all(w["valid"] for w in warm),
            "hessian_agreement": float(np.abs(hess["structured"] - hess["differences"]).max()) / scale,
            "hessian_at_warm_s": {"structured": hess["structured_s"], "central differences": hess["differences_s"]},
            "vm_hwm_mib": int(status["VmHWM"].split()[0]) // 1024}


def main() -> None:
    if sys.argv[1] == "--child":
        setting = {"True": True, "False": False}.get(sys.argv[4], sys.argv[4])
        print("RESULT " + json.dumps(child(sys.argv[2], int(float(sys.argv[3])), setting)), flush=True)
        return
    key, repeats = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2
    for _ in range(repeats):
        for structured in (False, "auto", True):
            out = subprocess.run([sys.executable, __file__, "--child", key, "1e5", str(structured)],
                                 capture_output=True, text=True, check=False)
            lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
            print(lines[-1][7:] if lines else f"failed: {out.stderr[-2000:]}", flush=True)


if __name__ == "__main__":
    main()
