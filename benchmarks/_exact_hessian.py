"""Exact Hessian through valid caches vs central differences (issue 26; RESULTS.md, not in ``make bench``).

The demo's amplitude model, K*(892) mass and width floating, NOT precomputed: ``hessian_at`` exact (second-order
autodiff through the valid caches) vs central differences of exact gradients; first call and warm calls.

    .venv/bin/python benchmarks/_exact_hessian.py 2e4     # prints one JSON line
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

from zcache.loss import UnbinnedNLL

# The demo model is the repository's demos/amplitude.py (demos/ is not installed with zcache).
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from demos.amplitude import build_model  # noqa: E402

n = int(float(sys.argv[1])) if len(sys.argv) > 1 else 20_000
m = build_model(n)
pdf = m["pdf"]
np.random.seed(1)
data = pdf.sample(n)
kstar = next(a for a in m["sum"].amplitudes if a.name == "K*(892)")
kstar.mass.floating = kstar.width.floating = True
loss = UnbinnedNLL(pdf, data)
params = [p for p in loss.params if p.floating]
x0 = np.array([float(p.value()) for p in params])


def timed(call):
    """Seconds one call takes, and what it returns."""
    t0 = time.perf_counter()
    result = call()
    return time.perf_counter() - t0, result


first_vg, _ = timed(lambda: loss.value_gradient_at(x0, params))
out = {"n": n, "nparams": len(params), "first_value_gradient_s": round(first_vg, 1)}
# a moved point, then the start again: each call recomputes the caches on the mass and width
pairs = [timed(lambda: (loss.value_gradient_at(x0 * (1 + 1e-5), params), loss.value_gradient_at(x0, params)))[0]
         for _ in range(5)]
out["warm_value_gradient_ms"] = round(1e3 * float(np.median(pairs)) / 2, 1)
hessians = {}
for exact in (False, True):
    first, h = timed(lambda exact=exact: loss.hessian_at(x0, params, exact=exact).numpy())
    warm = [timed(lambda exact=exact: loss.hessian_at(x0, params, exact=exact))[0] for _ in range(3)]
    hessians[exact] = h
    out["exact" if exact else "differences"] = {"first_s": round(first, 1), "warm_s": round(float(np.median(warm)), 2)}
out["max_rel_diff"] = float(np.max(np.abs(hessians[True] - hessians[False])) / np.max(np.abs(hessians[True])))
print(json.dumps(out))
