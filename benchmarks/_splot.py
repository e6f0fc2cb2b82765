"""sWeights and their covariance correction: what each call costs, and the per-event Jacobian's two spellings.

``python benchmarks/_splot.py N``: a Gaussian + exponential mass fit of N events (shapes floating),
its sWeights, a one-parameter exponential fit of the sWeighted decay time and its corrected
covariance by eq. 18 and by the stacked sandwich; each call timed twice (first and warm), and the
per-event scores of the mass model's three shape parameters by ``tape.jacobian`` (vectorized loop)
and by two reverse passes (what ``zcache.inference`` uses). ``RESULTS.md``, "sWeights".
"""

from __future__ import annotations

import sys
import time

import numpy as np
import tensorflow as tf

import zcache
from zcache._engine.tf_internals import zcache_graphs
from zcache.inference import sweighted_covariance, sweights
from zcache.loss import ExtendedUnbinnedNLL, UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import Exponential, Gaussian, Space, SumPdf


def timed(label: str, call) -> object:
    for attempt in ("first", "warm"):
        start = time.perf_counter()
        out = call()
        print(f"{label:<40} {attempt:<5} {time.perf_counter() - start:8.3f} s")
    return out


def main() -> None:
    n = int(float(sys.argv[1]))
    rng = np.random.default_rng(1)
    n_sig = n // 4
    mass = np.r_[rng.normal(5.28, 0.02, n_sig), 5.1 + rng.exponential(0.3, 3 * n)][:n]
    mass = np.r_[mass[(mass > 5.1) & (mass < 5.5)]]
    time_ = rng.exponential(1.5, mass.size)
    space, tspace = Space("m", 5.1, 5.5), Space("t", 0.0, 40.0)
    mu, sigma = zcache.Parameter("mu", 5.28, lower=5.2, upper=5.35), zcache.Parameter("sigma", 0.02, lower=0.005, upper=0.1)
    lam = zcache.Parameter("lam", -3.0, lower=-20.0, upper=0.0)
    nsig = zcache.Parameter("nsig", n_sig, lower=0.0, upper=10.0 * n)
    nbkg = zcache.Parameter("nbkg", mass.size - n_sig, lower=0.0, upper=10.0 * n)
    model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[nsig, nbkg])
    mass_loss = ExtendedUnbinnedNLL(model, zcache.Data(mass, obs="m"))
    fit = Minuit().minimize(mass_loss)
    print(f"{mass.size} events, mass fit valid={fit.valid}")
    sw = timed("sweights", lambda: sweights(mass_loss, fit))
    lam_t = zcache.Parameter("lam_t", -0.5, lower=-5.0, upper=-0.05)
    time_loss = UnbinnedNLL(Exponential(tspace, lam_t), zcache.Data(time_, obs="t", weights=sw["nsig"]))
    time_fit = Minuit().minimize(time_loss)
    timed("sweighted_covariance langenbruch", lambda: sweighted_covariance(time_fit, time_loss, sw, method="langenbruch"))
    timed("sweighted_covariance sandwich", lambda: sweighted_covariance(time_fit, time_loss, sw, method="sandwich"))
    params = [mu, sigma, lam]
    variables = [p.variable for p in params]
    data = mass_loss.data

    def by_jacobian():
        with zcache_graphs():
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(variables)
                terms = model.log_pdf(data, raw=True)
            return tape.jacobian(terms, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)

    def by_two_reverse_passes():
        with zcache_graphs():
            with tf.GradientTape(persistent=True, watch_accessed_variables=False) as outer:
                with tf.GradientTape(watch_accessed_variables=False) as inner:
                    inner.watch(variables)
                    terms = model.log_pdf(data, raw=True)
                probe = tf.zeros_like(terms)
                outer.watch(probe)
                grads = inner.gradient(terms, variables, output_gradients=probe)
                sums = [tf.reduce_sum(g) for g in grads]
            return [outer.gradient(s, probe) for s in sums]

    a = timed("scores: tape.jacobian (eager)", by_jacobian)
    b = timed("scores: two reverse passes (eager)", by_two_reverse_passes)
    print("largest difference", max(float(tf.reduce_max(tf.abs(x - y))) for x, y in zip(a, b, strict=True)))


if __name__ == "__main__":
    main()
