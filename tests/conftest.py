"""Shared fixtures: every test starts in the default modes with no traced graphs.

Hypothesis profiles, chosen by the environment variable ``HYPOTHESIS_PROFILE`` (or pytest's
``--hypothesis-profile``); without either, ``ci`` -- or ``dev`` when the run leaves the slow
tests out (``-m "not slow"``, ``make test-fast``), so that the inner loop runs short property
tests and state machines and ``make test`` the full ones:

- ``dev``: 2 examples, state machines of at most 6 steps (seconds: a smoke run of each property);
- ``ci``: 10 examples, 12 steps (the suite's settings; ``make test``, which must stay within CI's
  25 minutes: the deep runs are ``stress`` and ``make stress``);
- ``stress``: 400 examples, 50 steps (many minutes; ``make stress`` runs far more, in workers).

No deadline in any (a first call traces TensorFlow graphs). A test with its own ``@settings``
keeps those values and inherits the others from the profile.
"""

from __future__ import annotations

import gc
import os
import re

import numpy as np
import pytest
from helpers import QUIET_DASK, graph_mode_params, save_modes
from hypothesis import HealthCheck, settings

import zcache

_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("dev", max_examples=2, stateful_step_count=6, deadline=None, suppress_health_check=_HEALTH)
settings.register_profile("ci", max_examples=10, stateful_step_count=12, deadline=None, suppress_health_check=_HEALTH)
settings.register_profile(
    "stress", max_examples=400, stateful_step_count=50, deadline=None, suppress_health_check=_HEALTH
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    """Load ``dev`` (before any test module builds its settings) when slow tests are deselected."""
    if "HYPOTHESIS_PROFILE" in os.environ or config.getoption("--hypothesis-profile", None):
        return
    if re.search(r"\bnot\s+slow\b", config.getoption("markexpr", "") or ""):
        settings.load_profile("dev")


#: doctests too costly for the fast loop (batched or toy fits, MINOS and profiles, ampform models): a doctest
#: cannot carry a mark, so they are named here; the fast loop keeps each module's other examples
SLOW_DOCTESTS = {f"zcache/{name}" for name in (
    "scale/_batch.py::zcache.scale._batch", "scale/_batch.py::zcache.scale._batch.BatchedLoss", "toys.py::zcache.toys",
    "binned.py::zcache.binned", "plot/_inference.py::zcache.plot._inference.plot_profile",
    "amplitude/_ampform.py::zcache.amplitude._ampform.from_helicity_model",
    "amplitude/_ampform.py::zcache.amplitude._ampform.phasespace_generator",
    "amplitude/_kinematics.py::zcache.amplitude._kinematics",
    "minimize.py::zcache.minimize.Scipy", "_fitting/results.py::zcache._fitting.results", "shapes/__init__.py::zcache.shapes",
    "loss.py::zcache.loss.SimultaneousLoss", "binned.py::zcache.binned.BinnedNLL", "binned.py::zcache.binned.ExtendedBinnedNLL",
    *(f"_fitting/results.py::zcache._fitting.results.FitResult.{n}" for n in ("minos", "profile", "to_dict", "to_pandas")),
    # toys and scans: 7-15 CPU seconds each (CONTRIBUTING.md, "Test times")
    "inference/_toy_calculator.py::zcache.inference._toy_calculator.ToyCalculator",
    "inference/_toy_calculator.py::zcache.inference._toy_calculator.ToyCalculator.discovery",
    "inference/_scans.py::zcache.inference._scans.profile_scan",
    "inference/_toys.py::zcache.inference._toys.run_hypothesis_toys",
    # an upper limit (a scan of CLs) and sWeights' corrected covariance: about 4 and 3 CPU seconds
    "inference/_answers.py::zcache.inference._answers.upper_limit",
    "inference/_splot.py::zcache.inference._splot.sweighted_covariance",
)}


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items):
    """Mark the doctests named in ``SLOW_DOCTESTS`` slow (a doctest has no decorator to carry the mark), and every
    test marked ``exhaustive`` slow too.

    ``exhaustive`` marks the costlier repeats of a behaviour that `make test` (CI) checks in another mode, size or
    combination: `make test-all` runs them, `make test` leaves them out to keep CI's clean-clone run within its
    25 minutes. The mark sits at the test (``pytest.param(..., marks=pytest.mark.exhaustive)`` for a case, a
    decorator for a whole test), with a comment saying what `make test` keeps of the same behaviour.
    """
    for item in items:
        if item.nodeid in SLOW_DOCTESTS or item.get_closest_marker("exhaustive") is not None:
            item.add_marker(pytest.mark.slow)
    # A listed id that matches nothing (a renamed doctest) would silently move a costly doctest back into the fast
    # loop: every listed id of a file that was collected whole must be among the collected items.
    if items and not any("::" in str(arg) for arg in items[0].config.args):
        ids = {item.nodeid for item in items}
        files = {nodeid.split("::")[0] for nodeid in ids}
        stale = sorted(n for n in SLOW_DOCTESTS if n.split("::")[0] in files and n not in ids)
        if stale:
            raise pytest.UsageError("tests/conftest.py lists ids that match no test (renamed?): " + ", ".join(stale))


@pytest.fixture(autouse=True)
def _restore_modes():
    """Restore graph/autograd modes and drop traced graphs around every test."""
    restore = save_modes()
    yield
    restore()
    zcache.clear_graph_cache()


@pytest.fixture(params=graph_mode_params())
def graph_mode(request):
    """Run a test under each graph mode ([auto] only in full runs: see helpers.graph_mode_params)."""
    with zcache.set_graph_mode(request.param):
        yield request.param


@pytest.fixture(params=[True, False], ids=["graph", "eager"])
def mode(request):
    """Graph or eager, for tests whose traces are expensive ('auto' traces 'tensor' and 'loss'
    exactly like True)."""
    with zcache.set_graph_mode(request.param):
        yield request.param


@pytest.fixture(scope="session")
def dask_client():
    """One 2-worker ``zcache.toys.local_cluster`` (worker processes, 127.0.0.1) and its client for the session of
    each pytest(-xdist) process, shared by test_distributed.py and test_toys.py: each worker process pays Python's,
    Dask's and TensorFlow's imports once, not once per module. A test that kills a worker (the nanny starts a
    replacement, as it would for a user) waits for the replacement before it ends
    (``helpers.wait_for_replaced_worker``), so the next test finds two workers again."""
    distributed = pytest.importorskip("distributed")
    import dask

    from zcache.toys import local_cluster

    # Idle for most of the session, a cluster with Dask's default monitors still burns CPU (its
    # statistical profiler samples every 10 ms), charged to whichever test runs last in the process.
    with dask.config.set(QUIET_DASK):
        cluster = local_cluster(2)
        client = distributed.Client(cluster)
        yield client
        client.close()
        cluster.close()


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def collect():
    """Run the garbage collector (for weak-reference tests)."""

    def run():
        for _ in range(3):
            gc.collect()

    return run
