"""What FitMachine's ``distributed_parts`` rule shares in one process: a Dask cluster, the parts' builder, the losses.

The cluster is started at the rule's first call and kept for the process (starting one per sequence would
cost each sequence two TensorFlow imports). It runs in a child process of its own (:data:`_SERVE`), not
as a ``LocalCluster`` here: ``make stress`` runs the machines in daemonic worker
processes, which may not start the cluster's nanny processes themselves. The child closes the cluster when
this process exits or dies (its stdin, a pipe from here, reaches end of file).

The Dask workers import this module to build a part (``build_part`` is pickled by reference); importing it
starts nothing.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
from typing import Any

import numpy as np
from helpers import HI, LIMITS, LO, NAMES, QUIET_DASK, dask_environment, np_extended_nll

import zcache

#: The parameters of the parts' model: their own names, so that nothing of the machine's model is shared.
PREFIX = "fd_"
START = {"mu": 5.0, "sigma": 0.6, "lam": -0.3, "nsig": 250.0, "nbkg": 450.0}


def events() -> np.ndarray:
    """700 events of the machine's Gauss + Exp shapes (numpy only), the same in every process."""
    rng = np.random.default_rng(51)
    sig = rng.normal(START["mu"], START["sigma"], 500)
    sig = sig[(sig >= LO) & (sig <= HI)][:250]
    lam = START["lam"]
    bkg = LO + np.log1p(rng.uniform(size=450) * np.expm1(lam * (HI - LO))) / lam
    return rng.permutation(np.concatenate([sig, bkg]))


def numpy_nll(x: np.ndarray, extended: bool, values: dict[str, float]) -> float:
    """The NLL of ``x``: the numpy extended NLL, less its Poisson term nu - N log nu where the loss is not extended."""
    nll = np_extended_nll(x, *(values[n] for n in NAMES))
    if extended:
        return nll
    nu = values["nsig"] + values["nbkg"]
    return nll - nu + len(x) * np.log(nu)


def build_part(spec: tuple[np.ndarray, bool]) -> Any:
    """The loss of one part (on a worker) or of all events (here): an extended Gauss + Exp, or its shape only."""
    from zcache.loss import ExtendedUnbinnedNLL, UnbinnedNLL
    from zcache.models import Exponential, Gaussian, Space, SumPdf

    x, extended = spec
    p = {n: zcache.Parameter(PREFIX + n, START[n], *LIMITS[n]) for n in NAMES}
    model = SumPdf([Gaussian(Space("x", LO, HI), p["mu"], p["sigma"]), Exponential(Space("x", LO, HI), p["lam"])],
                   yields=[p["nsig"], p["nbkg"]])
    return (ExtendedUnbinnedNLL if extended else UnbinnedNLL)(model, zcache.Data(np.asarray(x), obs="x"))


# -- one cluster per process ---------------------------------------------------------------------------------
#: The cluster's own process (zcache.toys.local_cluster's settings): its address on stdout, closed at the end of stdin.
_SERVE = """
import sys
from distributed import LocalCluster
with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                  dashboard_address="127.0.0.1:0") as cluster:
    print(cluster.scheduler_address, flush=True)
    sys.stdin.read()
"""
_CLUSTER: dict[str, Any] = {}
_LOSSES: dict[tuple[int, bool], Any] = {}  # (parts, extended) -> DistributedLoss, built once per process
_LOCAL: dict[bool, Any] = {}  # extended -> the same loss of all events in this process


def client() -> Any:
    """The process's Dask client of a 2-worker cluster (started at the first call, closed at exit)."""
    if "client" not in _CLUSTER:
        import distributed

        # this process's path ('' is the working directory): the workers import this module and this zcache
        path = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
        env = {**os.environ, **dask_environment(QUIET_DASK), "PYTHONPATH": os.pathsep.join(path)}
        child = subprocess.Popen([sys.executable, "-c", _SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 env=env, text=True)
        address = child.stdout.readline().strip()
        if not address.startswith("tcp://"):
            child.kill()
            raise RuntimeError(f"the test cluster did not start (it printed {address!r})")
        _CLUSTER["child"], _CLUSTER["client"] = child, distributed.Client(address)
        atexit.register(_close)
    return _CLUSTER["client"]


def _close() -> None:
    for loss in _LOSSES.values():
        try:
            loss.close()
        except Exception:  # noqa: BLE001 - at exit: the cluster may be gone already
            pass
    _LOSSES.clear()
    _CLUSTER.pop("client").close()
    child = _CLUSTER.pop("child")
    child.stdin.close()  # the child closes its cluster and exits
    try:
        child.wait(30)
    except subprocess.TimeoutExpired:
        child.kill()


def losses(parts: int, extended: bool) -> tuple[Any, Any]:
    """The DistributedLoss of ``parts`` parts of :func:`events` and the same loss of all events here."""
    from zcache.scale import DistributedLoss

    if (parts, extended) not in _LOSSES:
        _LOSSES[parts, extended] = DistributedLoss(
            build_part, [(x, extended) for x in np.array_split(events(), parts)], client(),
            name=f"fit machine: {parts} parts, {'extended' if extended else 'not extended'}")
    if extended not in _LOCAL:
        _LOCAL[extended] = build_part((events(), extended))
        zcache.precompute(_LOCAL[extended])
    return _LOSSES[parts, extended], _LOCAL[extended]

