"""``make toys``: a 1000-toy study of a Gauss + Exp fit on a local Dask cluster.

Each toy draws a Poisson number of events around 10,000 (3,000 signal, 7,000 background), fits
the five parameters (mean, width, slope, two yields) with MIGRAD-equivalent batched fits of 100
toys per compiled call, on two worker processes (``dask.distributed.LocalCluster``), and the
pulls, their Gaussian fits and the coverage come out as a table and as PNGs in
``demo_output/toys/``.

Run ``python -m demos.toys [--toys N] [--batch B] [--workers W] [--no-cluster]``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["build_study", "main"]


def build_study(n_events: int = 10_000) -> tuple[Any, Any]:
    """The study's model and loss: Gauss (signal) + Exp (background) on [0, 10], extended.

    A module-level function, so a Dask worker can build the study from its name.

    Parameters
    ----------
    n_events : int
        The expected number of events (30 % signal).

    Returns
    -------
    (zcache.models.SumPdf, zcache.loss.ExtendedUnbinnedNLL)

    Examples
    --------
    >>> model, loss = build_study(500)
    >>> [p.name for p in loss.params]
    ['toy_nsig', 'toy_nbkg', 'toy_mu', 'toy_sigma', 'toy_lambda']
    """
    import zcache
    from zcache.loss import ExtendedUnbinnedNLL
    from zcache.models import Exponential, Gaussian, Space, SumPdf

    space = Space("x", 0.0, 10.0)
    mu = zcache.Parameter("toy_mu", 5.0, lower=3.0, upper=7.0)
    sigma = zcache.Parameter("toy_sigma", 0.6, lower=0.1, upper=2.0)
    lam = zcache.Parameter("toy_lambda", -0.3, lower=-2.0, upper=-0.01)
    nsig = zcache.Parameter("toy_nsig", 0.3 * n_events, lower=0.0, upper=5.0 * n_events)
    nbkg = zcache.Parameter("toy_nbkg", 0.7 * n_events, lower=0.0, upper=5.0 * n_events)
    model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[nsig, nbkg])
    zcache.models.set_seed(0)
    return model, ExtendedUnbinnedNLL(model, model.sample(n_events))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the study, print the table, write the pull plots.

    Parameters
    ----------
    argv : sequence of str, optional
        Command-line arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        0 on success.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toys", type=int, default=1000)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-cluster", action="store_true", help="run in this process")
    parser.add_argument("--out", default="demo_output/toys")
    args = parser.parse_args(argv)

    import functools

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zcache.plot import plot_pulls
    from zcache.toys import local_cluster, run_toys

    model, loss = build_study(args.events)
    client = cluster = None
    if not args.no_cluster:
        from distributed import Client

        cluster = local_cluster(args.workers)
        client = Client(cluster)
        print(f"Dask LocalCluster: {args.workers} worker processes")
    t0 = time.perf_counter()
    try:
        toys = run_toys(model, loss, n_toys=args.toys, seed=2026, batch=args.batch, client=client,
                        factory=functools.partial(build_study, args.events), progress=None)
    finally:
        if client is not None:
            client.close()
            cluster.close()
    wall = time.perf_counter() - t0
    print(f"{args.toys} toys of ~{args.events} events, batches of {args.batch}: {wall:.1f} s "
          f"({1e3 * wall / args.toys:.2f} ms per toy, compiling included)")
    print(toys)
    print("\n  parameter      truth     pull mean        pull width       1-sigma coverage  2-sigma coverage")
    cover = toys.coverage()
    for name, (mean, width) in toys.pull_summary().items():
        n = int(toys.table["valid"].sum())
        c1, e1 = cover[name][1.0]
        c2, e2 = cover[name][2.0]
        print(f"  {name:<12} {toys.truth[name]:9.3f}  {mean:+.3f} +- {width / n ** 0.5:.3f}  "
              f"{width:.3f} +- {width / (2 * n) ** 0.5:.3f}   {100 * c1:5.1f} +- {100 * e1:.1f} %    "
              f"{100 * c2:5.1f} +- {100 * e2:.1f} %")
    out = Path(args.out)
    os.makedirs(out, exist_ok=True)
    for name in toys.names:
        drawn = plot_pulls(toys, name)
        drawn.figure.savefig(out / f"pulls_{name}.png", dpi=90)
        plt.close(drawn.figure)
    toys.to_pandas().to_csv(out / "toys.csv")
    print(f"\nwrote {out}/pulls_<parameter>.png and {out}/toys.csv")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
