"""``python -m demos.basics``: the engine on a small model, end to end (the main demo is ``demos.amplitude``).

Part 1: a signal line shape times an efficiency (data-only) plus a background;
the demo changes parameters and data and prints, per cache, hits and misses, then
times cached against uncached evaluation of the same loss in graph mode.

Part 2: an extended Gauss + Exponential fit with Minuit, with and without the
precompute step (the background shape is fixed, so its per-event values are
cached), the precompute report, and a toy study that never retraces.
"""

from __future__ import annotations

import time

import numpy as np
import tensorflow as tf

import zcache


def median_ms(fn, repeats: int = 30) -> float:
    """The median wall time of ``fn()`` in milliseconds, after one warm-up call.

    Parameters
    ----------
    fn : callable
        Called without arguments.
    repeats : int
        Timed calls.

    Returns
    -------
    float
    """
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def build(n_events: int = 200_000, seed: int = 1):
    """The demo model: a signal line shape times an efficiency, plus a background.

    Parameters
    ----------
    n_events : int
        Events of the (uniform) data.
    seed : int
        Seed of the data.

    Returns
    -------
    tuple
        (parameters by name, data, caches by name, cached loss, uncached loss); the losses
        are ``zcache.function`` objects.
    """
    rng = np.random.default_rng(seed)
    x = zcache.Data(rng.uniform(0.0, 10.0, n_events), name="x")
    mass = zcache.Parameter("mass", 5.0, lower=0.0, upper=10.0, floating=False)
    width = zcache.Parameter("width", 0.8, lower=0.01, upper=5.0, floating=False)
    slope = zcache.Parameter("slope", -0.3, lower=-5.0, upper=5.0)
    frac = zcache.Parameter("frac", 0.4, lower=0.0, upper=1.0)

    def efficiency():  # depends on data only
        return 1.0 / (1.0 + tf.exp(-(x.value() - 1.0))) * (1.0 + 0.05 * tf.sin(3.0 * x.value()))

    def signal():  # depends on data and the fixed mass and width
        dx = x.value() - mass.value()
        gamma = width.value()
        return gamma / (dx * dx + 0.25 * gamma * gamma)

    def background():
        return tf.exp(slope.value() * x.value())

    eff = zcache.CachedTensor(efficiency, name="efficiency")
    sig = zcache.CachedTensor(lambda: signal() * eff.value(), name="signal*eff")
    bkg = zcache.CachedTensor(lambda: background() * eff.value(), name="background*eff")

    def nll(sig_value, bkg_value):
        s = sig_value / tf.reduce_mean(sig_value)
        b = bkg_value / tf.reduce_mean(bkg_value)
        return -tf.reduce_sum(tf.math.log(frac.value() * s + (1.0 - frac.value()) * b))

    cached_loss = zcache.function(lambda: nll(sig.value(), bkg.value()), wraps="loss")
    uncached_loss = zcache.function(
        lambda: nll(signal() * efficiency(), background() * efficiency()), wraps="loss"
    )
    params = {"mass": mass, "width": width, "slope": slope, "frac": frac}
    return params, x, {"efficiency": eff, "signal*eff": sig, "background*eff": bkg}, cached_loss, uncached_loss


def _table(caches: dict) -> str:
    rows = [f"    {'cache':<16}{'hits':>6}{'misses':>8}{'valid':>7}{'kB':>9}"]
    for name, c in caches.items():
        s = c.stats
        rows.append(f"    {name:<16}{s['hits']:>6}{s['misses']:>8}{str(c.is_valid):>7}{c.nbytes / 1024:>9.0f}")
    return "\n".join(rows)


def _fit_model(space, lam, tag: str):
    from zcache.models import Exponential, Gaussian, SumPdf

    mu = zcache.Parameter(f"mu{tag}", 5.0, lower=3.0, upper=7.0)
    sigma = zcache.Parameter(f"sigma{tag}", 0.5, lower=0.05, upper=2.0)
    nsig = zcache.Parameter(f"nsig{tag}", 1.0, lower=0.0, upper=1e7)
    nbkg = zcache.Parameter(f"nbkg{tag}", 1.0, lower=0.0, upper=1e7)
    model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[nsig, nbkg])
    return model, [mu, sigma, nsig, nbkg]


def fit_section(n_events: int = 100_000, n_toys: int = 20) -> None:
    """Part 2: fit with and without precompute, then toys.

    Parameters
    ----------
    n_events : int
        Events of the fitted dataset.
    n_toys : int
        Toys of the toy study.
    """
    from zcache.loss import ExtendedUnbinnedNLL
    from zcache.minimize import Minuit
    from zcache.models import Space
    from zcache.toys import run_toys

    print(f"\n\nPart 2: extended Gauss + Exponential fit, {n_events} events, Minuit (graph mode)\n")
    space = Space("x", 0.0, 10.0)
    lam = zcache.Parameter("lam", -0.3, lower=-2.0, upper=-0.01, floating=False)  # fixed background shape
    truth = [5.0, 0.5, 0.3 * n_events, 0.7 * n_events]
    start = [5.3, 0.7, 0.4 * n_events, 0.6 * n_events]
    gen_model, gen_params = _fit_model(space, lam, "_gen")
    zcache.set_values(gen_params, truth)
    zcache.models.set_seed(1)
    data = gen_model.sample(n_events)

    results = {}
    for label, precompute in (("without precompute", False), ("with precompute", True)):
        model, params = _fit_model(space, lam, "")
        loss = ExtendedUnbinnedNLL(model, data)
        times = []
        for _ in range(3):  # the first fit includes tracing
            zcache.set_values(params, start)
            result = Minuit(precompute=precompute).minimize(loss)
            times.append(result.time)
        results[label] = (result, times)
        print(f"  {label}: first fit {times[0]:.3f} s, then {np.median(times[1:]):.3f} s "
              f"(nfcn {result.nfcn}, ngrad {result.ngrad}, nhessian {result.nhessian})")
    result, _ = results["with precompute"]
    print("\n  " + str(result).replace("\n", "\n  "))
    print("\n  " + str(result.precompute).replace("\n", "\n  "))
    slow, fast = (np.median(results[k][1][1:]) for k in ("without precompute", "with precompute"))
    print(f"\n  precompute speed-up per fit: {slow / fast:.2f}x")

    toy_events = max(n_events // 10, 100)
    gen_values = [5.0, 0.5, 0.3 * toy_events, 0.7 * toy_events]
    toy_model, toy_params = _fit_model(space, lam, "_toy")
    zcache.set_values(toy_params, gen_values)
    toy_loss = ExtendedUnbinnedNLL(toy_model, toy_model.sample(toy_events))
    toys = run_toys(toy_model, toy_loss, n_toys=n_toys, seed=2)
    print(f"\n  toy study, ~{toy_events} events per toy (Poisson):\n  " + str(toys).replace("\n", "\n  "))
    traces = [f.trace_count for f in toy_loss.functions() if f.trace_count]
    print(f"  traces over {n_toys} toys: loss functions {traces}, sampler {toy_model.sampler.trace_count}")


def main(n_events: int = 200_000, n_fit_events: int = 100_000, n_toys: int = 20) -> None:
    """Run the demo and print what the caches did.

    Parameters
    ----------
    n_events : int
        Events of part 1.
    n_fit_events : int
        Events of the fit in part 2.
    n_toys : int
        Toys in part 2.
    """
    print(f"zcache demo: {n_events} events, TensorFlow {tf.__version__}\n")
    params, x, caches, cached_loss, uncached_loss = build(n_events)
    steps = [
        ("first call (all miss)", lambda: None),
        ("same values again (all hit)", lambda: None),
        ("slope changed (background recomputed)", lambda: params["slope"].set_value(-0.25)),
        ("frac changed (no cache touched)", lambda: params["frac"].set_value(0.45)),
        ("mass changed (signal recomputed)", lambda: params["mass"].set_value(5.1)),
        ("new data, 150k events (everything recomputed)",
         lambda: x.set_data(np.random.default_rng(2).uniform(0.0, 10.0, 150_000))),
    ]
    for label, change in steps:
        change()
        cached, reference = float(cached_loss()), float(uncached_loss())
        assert abs(cached - reference) <= 1e-9 * abs(reference), (cached, reference)
        print(f"  {label}: loss = {cached:.6f} (uncached {reference:.6f})")
    print("\n  per-cache statistics:\n" + _table(caches))
    print(f"\n  traces: cached loss {cached_loss.trace_count}, uncached loss {uncached_loss.trace_count}"
          " (value and data changes never retrace)")

    slope, frac = params["slope"], params["frac"]
    t_hit = median_ms(cached_loss)
    t_uncached = median_ms(uncached_loss)
    state = {"i": 0}

    def vary_slope():
        state["i"] += 1
        slope.set_value(-0.3 + 1e-4 * (state["i"] % 100))
        return cached_loss()

    def vary_frac():
        state["i"] += 1
        frac.set_value(0.4 + 1e-4 * (state["i"] % 100))
        return cached_loss()

    t_slope = median_ms(vary_slope)
    t_frac = median_ms(vary_frac)
    print("\n  timings (graph mode, median of 30):")
    print(f"    uncached loss                          {t_uncached:8.3f} ms")
    print(f"    cached loss, nothing changed           {t_hit:8.3f} ms  ({t_uncached / t_hit:5.1f}x faster)")
    print(f"    cached loss, frac changed (no cache)   {t_frac:8.3f} ms  ({t_uncached / t_frac:5.1f}x faster)")
    print(f"    cached loss, slope changed (1 cache)   {t_slope:8.3f} ms  ({t_uncached / t_slope:5.1f}x faster)")
    print("\n  dependency graph (DOT):")
    print("    " + zcache.to_dot().replace("\n", "\n    ").rstrip())
    fit_section(n_fit_events, n_toys)


if __name__ == "__main__":
    main()
