"""The first compiled fit of the demo's D+ -> K- pi+ pi+ model: where its time goes.

``python benchmarks/_first_fit.py N uncached|precompute [--profile]``: builds the demo's model
(``demos.amplitude.build_model``, 2N phase-space events), draws N events, fits the 8
couplings from a shifted start with ``Minuit()`` (the compiled fit; ``precompute``: the cached
model, precompute on; ``uncached``: the model without caches, precompute off) twice, and prints the
first fit's time, the part spent finding the served caches (``CompiledFit._served``) and the warm
fit. Run old and new code alternately, each in a fresh process (``RESULTS.md``, "First fit").
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from pathlib import Path

import numpy as np

import zcache
from zcache._fitting import compiled_fit
from zcache.loss import UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import set_seed

# The demo model is the repository's demos/amplitude.py (demos/ is not installed with zcache).
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from demos.amplitude import build_model  # noqa: E402


def main() -> None:
    n, which = int(float(sys.argv[1])), sys.argv[2]
    set_seed(2026)
    model = build_model(2 * n)
    sample = model["pdf"].sample(n)
    data = zcache.Data(sample.value(), name="data", obs=sample.obs)
    loss = UnbinnedNLL(model["pdf_uncached" if which == "uncached" else "pdf"], data)
    start = np.array([float(p) for p in loss.params]) * 1.05
    served = {"s": 0.0}
    original = compiled_fit.CompiledFit._served

    def timed(self: compiled_fit.CompiledFit, x0: np.ndarray) -> dict:
        t0 = time.perf_counter()
        try:
            return original(self, x0)
        finally:
            served["s"] += time.perf_counter() - t0

    compiled_fit.CompiledFit._served = timed
    profile = cProfile.Profile() if "--profile" in sys.argv else None
    zcache.set_values(loss.params, start)
    t0 = time.perf_counter()
    if profile:
        profile.enable()
    first = Minuit(precompute=which == "precompute").minimize(loss)
    if profile:
        profile.disable()
    t_first = time.perf_counter() - t0
    zcache.set_values(loss.params, start)
    t0 = time.perf_counter()
    Minuit(precompute=which == "precompute").minimize(loss)
    t_warm = time.perf_counter() - t0
    print(f"{which} n={n}: first fit {t_first:.2f} s (finding served caches {served['s']:.2f} s), warm {t_warm:.2f} s, "
          f"path {first.path}, valid {first.valid}")
    if profile:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
