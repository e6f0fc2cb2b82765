"""The cost of one call of a ``DistributedLoss`` (issue 28): latency and payload bytes, per call and per fit.

For each size, the Gauss + Exp loss of ``n`` events is built in parts on a ``LocalCluster`` of
``--workers`` single-threaded workers (one part per worker, each part generated on its worker from
a seed: nothing but the spec is shipped), and compared with the same loss in this process:

- per call: the median wall time of ``value_gradient_at`` at a fixed point (after warm-up), the
  payload bytes sent and received per call (``DistributedLoss.stats``);
- per fit: ``Minuit().minimize`` from the same start (MIGRAD + HESSE; the in-process fit with
  ``compiled=False``, the same algorithm), twice: the first (``first_fit_s``: the parts trace their
  Hessian) and the second, warm (``fit_s``), its calls (value + gradient and Hessian, one task per
  part each), and the largest difference of the fitted values in units of their errors.

``n = 0`` gives parts of 10 events: the protocol's overhead alone (with ``--parts 2 16``: its growth per
task). ``worker_rss_MB`` is the largest peak RSS of a worker process (TensorFlow itself is ~0.5 GB). Helpers for
``benchmarks/bench_large.py``; ``python benchmarks/_distributed_cost.py --sizes 0 1e6`` prints a table.
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

from _harness import markdown_table  # noqa: E402

START = {"mu": 5.2, "sigma": 0.8, "lam": -0.25, "frac": 0.35}
POINT = {"mu": 5.1, "sigma": 0.7, "lam": -0.3, "frac": 0.3}


def events(n: int, seed: int) -> np.ndarray:
    """``n`` Gauss + Exp events in [0, 10] (30 % signal), generated with numpy from ``seed``."""
    rng = np.random.default_rng(seed)
    n_sig = int(0.3 * n)
    ev = np.concatenate([rng.normal(5.0, 0.7, n_sig), rng.exponential(4.0, 2 * n)])
    ev = ev[(ev > 0.0) & (ev < 10.0)]
    return ev[: n] if len(ev) >= n else np.resize(ev, n)


def build(spec: tuple[int, int]) -> Any:
    """The loss of one part, ``(n, seed)``: generated where it is built (module level: Dask pickles it)."""
    return gauss_exp(events(*spec))


def gauss_exp(ev: np.ndarray) -> Any:
    """The Gauss + Exp loss of ``ev``."""
    import zcache
    from zcache.loss import UnbinnedNLL
    from zcache.models import Exponential, Gaussian, Space, SumPdf

    s = Space("x", 0.0, 10.0)
    mu = zcache.Parameter("mu", START["mu"], lower=3.0, upper=7.0)
    sigma = zcache.Parameter("sigma", START["sigma"], lower=0.1, upper=3.0)
    lam = zcache.Parameter("lam", START["lam"], lower=-2.0, upper=-0.01)
    frac = zcache.Parameter("frac", START["frac"], lower=0.0, upper=1.0)
    model = SumPdf([Gaussian(s, mu, sigma), Exponential(s, lam)], fracs=[frac])
    return UnbinnedNLL(model, zcache.Data(ev))


def _rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _calls(loss: Any, x: np.ndarray, repeats: int) -> tuple[float, float]:
    """Median and fastest wall time of ``value_gradient_at(x)``."""
    loss.value_gradient_at(x)  # warm-up: traces
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        loss.value_gradient_at(x)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), float(np.min(times))


def _fit(loss: Any, compiled: bool) -> tuple[Any, float, float]:
    """The fit from START, its first time (tracing the Hessian included) and its time again (warm)."""
    from zcache.minimize import Minuit

    times = []
    for _ in range(2):
        for p in loss.get_params(floating=None):
            p.set_value(START[p.name])
        t0 = time.perf_counter()
        result = Minuit(compiled=compiled).minimize(loss)
        times.append(time.perf_counter() - t0)
    return result, times[0], times[1]


def measure(client: Any, n: int, parts: int, repeats: int = 20, local: bool = True) -> dict[str, Any]:
    """One row: per-call and per-fit cost of ``n`` events in ``parts`` parts (``n = 0``: 10 events per part).

    Parameters
    ----------
    client : distributed.Client
        The cluster.
    n : int
        Events in all (0: the overhead alone).
    parts : int
        Parts (one per worker is the natural choice).
    repeats : int
        Timed calls.
    local : bool
        Also time the same loss in this process.

    Returns
    -------
    dict
    """
    from zcache.scale import DistributedLoss

    sizes = [10] * parts if n == 0 else [len(c) for c in np.array_split(np.arange(n), parts)]
    specs = [(size, 1000 + i) for i, size in enumerate(sizes)]
    row: dict[str, Any] = {"events": n, "parts": parts}
    t0 = time.perf_counter()
    with DistributedLoss(build, specs, client) as loss:
        row["build_s"] = time.perf_counter() - t0
        x = np.array([POINT[p.name] for p in loss.params])
        loss.objective()  # precompute the parts, as a fit does
        row["call_s"], row["call_min_s"] = _calls(loss, x, repeats)
        before = (loss.stats.calls, loss.stats.bytes_sent, loss.stats.bytes_received)
        loss.value_gradient_at(x)
        row["sent_B"] = loss.stats.bytes_sent - before[1]
        row["received_B"] = loss.stats.bytes_received - before[2]
        fit, row["first_fit_s"], row["fit_s"] = _fit(loss, compiled=True)
        row["fit_calls"] = (loss.stats.calls - before[0] - 1) // 2
        row["worker_rss_MB"] = max(client.run(_rss_mb).values())
    if local:
        import zcache

        here = gauss_exp(np.concatenate([events(*s) for s in specs]))  # the same events in one process
        here_x = np.array([POINT[p.name] for p in here.params])
        zcache.precompute(here)
        row["local_call_s"] = _calls(here, here_x, repeats)[0]
        local_fit, _, row["local_fit_s"] = _fit(here, compiled=False)
        row["max_diff_sigma"] = max(abs(fit.values[k] - local_fit.values[k]) / local_fit.errors[k] for k in fit.values)
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=float, default=[0, 1e6])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--parts", type=int, nargs="+", default=None,
                        help="parts per size (default: one per worker); several values: each size with each")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    import distributed

    from zcache.toys import local_cluster

    with local_cluster(args.workers) as cluster, distributed.Client(cluster) as client:
        rows = [measure(client, int(n), parts, args.repeats)
                for n in args.sizes for parts in (args.parts or [args.workers])]
    print(markdown_table(rows))


if __name__ == "__main__":
    main()
