"""The asymptotic calculator's cost, and its agreement with pyhf.

``python benchmarks/_asymptotic_answers.py``: (1) the gallery's search (Gauss peak on an exponential,
1012 events, signal yield as POI, background yield and slope profiled): a CLs upper limit on 13 tested
values, cold (first fits and traces) and at 13 new values (warm); a discovery. (2) a two-bin counting
model with a 10 % background uncertainty: ``p_values`` at 10 values against ``pyhf.infer.hypotest``
(numpy backend) at the same 10, time (zcache's cold, and again with a new calculator on the same loss,
whose Asimov loss is new: its fits are traced again) and largest difference of the observed and expected CLs.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

import zcache
from zcache.binned import BinnedData, ExtendedBinnedNLL
from zcache.inference import AsymptoticCalculator, discovery, upper_limit
from zcache.loss import ExtendedUnbinnedNLL, GaussianConstraint
from zcache.models import Exponential, Gaussian, Space, SumPdf
from zcache.shapes import HistogramPdf


def search() -> None:
    rng = np.random.default_rng(12)
    space = Space("mass", 5.0, 5.6)
    u = rng.uniform(size=1000)
    background = 5.0 + np.log(1.0 + u * (np.exp(-3.0 * 0.6) - 1.0)) / -3.0
    data = zcache.Data(np.r_[rng.normal(5.28, 0.015, 12), background])
    nsig = zcache.Parameter("nsig", 10.0, lower=0.0, upper=200.0)
    nbkg = zcache.Parameter("nbkg", 900.0, lower=0.0, upper=5000.0)
    slope = zcache.Parameter("slope", -2.0, lower=-10.0, upper=0.0)
    model = SumPdf([Gaussian(space, 5.28, 0.015), Exponential(space, slope)], yields=[nsig, nbkg])
    calc = AsymptoticCalculator(ExtendedUnbinnedNLL(model, data), "nsig", signal_value=20.0)
    t0 = time.perf_counter()
    limit = upper_limit(calc, np.linspace(0.0, 60.0, 13))
    t1 = time.perf_counter()
    calc.p_values(np.linspace(2.5, 62.5, 13))
    t2 = time.perf_counter()
    d = discovery(calc)
    t3 = time.perf_counter()
    print(f"search: upper limit, 13 values, cold {t1 - t0:.2f} s (observed {limit.observed:.2f}, median expected "
          f"{limit.expected[2]:.2f}); 13 new values, warm {t2 - t1:.2f} s; discovery {t3 - t2:.2f} s "
          f"(Z = {d.significance:.3f}, expected {d.expected_significance:.3f})")


def against_pyhf() -> None:
    import pyhf

    pyhf.set_backend("numpy")
    s, b, n, delta = np.array([5.0, 3.0]), np.array([10.0, 6.0]), [14.0, 9.0], 0.1
    spec = {"channels": [{"name": "c", "samples": [
        {"name": "sig", "data": s.tolist(), "modifiers": [{"name": "mu", "type": "normfactor", "data": None}]},
        {"name": "bkg", "data": b.tolist(), "modifiers": [{"name": "u", "type": "histosys", "data": {
            "hi_data": (b * (1 + delta)).tolist(), "lo_data": (b * (1 - delta)).tolist()}}]}]}]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        model = pyhf.Model(spec)
    data = n + model.config.auxdata
    mus = np.linspace(0.2, 2.0, 10)
    t0 = time.perf_counter()
    ref = [pyhf.infer.hypotest(mu, data, model, test_stat="qtilde", return_expected_set=True) for mu in mus]
    t1 = time.perf_counter()
    edges = [0.0, 1.0, 2.0]
    space = Space("x", 0.0, 2.0)
    sig = zcache.Parameter("s", 8.0, lower=0.0, upper=80.0)
    nb = zcache.Parameter("nb", 16.0, lower=16.0 * (1 - 5 * delta), upper=16.0 * (1 + 5 * delta))
    loss = ExtendedBinnedNLL(SumPdf([HistogramPdf(space, s, edges), HistogramPdf(space, b, edges)], yields=[sig, nb]),
                             BinnedData(n, edges), constraints=[GaussianConstraint([nb], [16.0], [1.6])])
    t2 = time.perf_counter()
    pv = AsymptoticCalculator(loss, sig).p_values(mus * 8.0)
    t3 = time.perf_counter()
    AsymptoticCalculator(loss, sig).p_values(mus * 8.0)  # a new calculator: the fits' programs are traced
    t4 = time.perf_counter()
    obs = max(abs(pv.cls[k] - float(r[0])) for k, r in enumerate(ref))
    exp = max(np.max(np.abs(pv.expected_cls[:, k] - np.array([float(e) for e in r[1]]))) for k, r in enumerate(ref))
    print(f"two bins, 10 values: pyhf.infer.hypotest {t1 - t0:.2f} s, zcache {t3 - t2:.2f} s (first fits and traces "
          f"included), {t4 - t3:.2f} s with a new calculator on the same loss; largest |difference| of CLs: "
          f"observed {obs:.1e}, expected {exp:.1e}")


if __name__ == "__main__":
    search()
    against_pyhf()
