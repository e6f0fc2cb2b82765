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
from helpers import graph_mode_params, save_modes
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


#: doctests too costly for the fast loop (2-14 s each: batched or toy fits, MINOS and profiles,
#: ampform models); the fast loop keeps each module's other examples
SLOW_DOCTESTS = {f"zcache/{name}" for name in (
    "scale/_batch.py::zcache.scale._batch", "scale/_batch.py::zcache.scale._batch.BatchedLoss", "toys.py::zcache.toys",
    "binned.py::zcache.binned", "plot.py::zcache.plot.plot_profile",
    "amplitude/_ampform.py::zcache.amplitude._ampform.from_helicity_model",
    "amplitude/_ampform.py::zcache.amplitude._ampform.phasespace_generator",
    "amplitude/_kinematics.py::zcache.amplitude._kinematics",
    "minimize.py::zcache.minimize.Scipy", "results.py::zcache.results", "shapes/__init__.py::zcache.shapes",
    "loss.py::zcache.loss.SimultaneousLoss", "binned.py::zcache.binned.BinnedNLL", "binned.py::zcache.binned.ExtendedBinnedNLL",
    *(f"results.py::zcache.results.FitResult.{n}" for n in ("minos", "profile", "to_dict", "to_pandas")),
)}


#: The costlier repeats of a behaviour that `make test` (CI) checks in another mode, size or combination: marked
#: ``exhaustive``, run by `make test-all`, left out of `make test` to keep CI's clean-clone run (install, tests and
#: the documentation build) within its 25 minutes. Seconds are the CPU time of each, measured 2026-11-26 in the full
#: run; what CI keeps of the same behaviour follows each group.
EXHAUSTIVE = {
    # a chunked loss evaluated eagerly (12-16 s loaded): its traced calls are what every other test_chunks test and
    # the FitMachine's chunked_fit check; eager evaluation of chunk parts is the UnbinnedNLL's, tested in test_loss
    "tests/test_chunks.py::test_eager_mode_gives_the_same_numbers",
    # padded data: 12 combinations (3 modes x weighted x extended), 66 s; CI keeps eager-unweighted-nll,
    # graph-weighted-extended, auto-weighted-nll and auto-unweighted-extended (every mode, weight and loss kind)
    *(f"tests/test_loss.py::test_padded_data_give_the_unpadded_loss[{c}]" for c in (
        "eager-unweighted-extended", "eager-weighted-nll", "eager-weighted-extended", "graph-unweighted-nll",
        "graph-unweighted-extended", "graph-weighted-nll", "auto-unweighted-nll", "auto-weighted-extended")),
    # a yield near (not at) its limit, eager 5.7 s and jit 11.7 s: CI keeps it in graph mode, and at-limit in all three
    "tests/test_minimize.py::test_yield_fitted_at_its_lower_limit_is_a_valid_fit[eager-near-limit]",
    "tests/test_minimize.py::test_yield_fitted_at_its_lower_limit_is_a_valid_fit[jit-near-limit]",
    # eager repeats of traced fits (24.7 s, 25.4 s, 13.9 s): CI keeps the graph (and auto) modes
    "tests/test_minimize.py::test_scipy_agrees_with_minuit_and_the_analytic_mle[eager]",
    "tests/test_binned.py::test_binned_nll_toy_loop_no_retrace[eager]",
    "tests/test_minimize.py::test_extended_fit_recovers_yields[eager]",
    # a third refused value under XLA (12 s): CI keeps NaN and a value above the limit
    "tests/test_jit.py::test_value_at_refuses_bad_values_under_jit[inf]",
    # the analytic-MLE fit in 9 combinations of mode and gradient (28.6 s): CI keeps graph-autodiff, eager-zcache-
    # numerical, eager-minuit-numerical, auto-autodiff, auto-minuit-numerical (every mode and every gradient)
    *(f"tests/test_minimize.py::test_gaussian_fit_finds_the_analytic_mle[{c}]" for c in (
        "graph-zcache-numerical", "eager-autodiff", "auto-zcache-numerical", "graph-minuit-numerical")),
    # weighted errors in 6 combinations (18.7 s): CI keeps asymptotic-Minuit, sumw2-Scipy, None-Minuit, None-Scipy
    "tests/test_minimize.py::test_weighted_fit_errors_match_numpy_reference[asymptotic-Scipy]",
    "tests/test_minimize.py::test_weighted_fit_errors_match_numpy_reference[sumw2-Minuit]",
    # compiled fit = MIGRAD + HESSE for 16 models (154 s): CI keeps 12 (the amplitude model: below);
    # twenty_parameters 30.7 s, Bernstein (Chebyshev kept) 4.8 s, Johnson SU 5.3 s
    *(f"tests/test_compiled_fit.py::test_compiled_fit_equals_migrad_hesse[{c}]" for c in (
        "twenty_parameters", "bernstein", "johnson_su")),
    # the longer FitMachine sequences (36 s): CI runs TestFitMachine; `make stress` runs 10,000 sequences
    "tests/test_properties_fit.py::TestFitMachineLong::runTest",
    # (measured 2026-11-26 in a clean-clone run, CI at 1,451 s of its 1,500) the jit Hessian with line shapes
    # floating on the 3-resonance bridge (42 s): CI keeps the 2-resonance bridge (the same XLA complex-gradient
    # regression, 33 s) and FitMachine's compiled_hessian rule on a bridged model
    "tests/test_amplitude_symbolic.py::test_jit_hessian_line_shapes_floating_bridge",
    # a yield at its limit, eager (15 s): CI keeps graph
    "tests/test_minimize.py::test_yield_fitted_at_its_lower_limit_is_a_valid_fit[eager-at-limit]",
    # memory per toy with a new model and traced function (14.5 s): CI keeps the superset with a new loss and a
    # Minuit fit per toy (test_new_fitted_model_per_toy_keeps_memory_bounded) and the toy-loop memory tests
    "tests/test_reliability.py::test_new_model_per_toy_keeps_memory_bounded",
    # (the clean-clone run after the three above still took 26.9 min here, tests 1,367 s; seconds from it)
    # the distributed loss's value, gradient and Hessian at one point (48 s with the cluster's start): CI keeps the
    # distributed fit, whose values (1e-8), errors (1e-8, from the summed Hessians) and fmin (1e-10) equal the
    # in-process fit's, and the killed-worker fit
    "tests/test_distributed.py::test_value_gradient_and_hessian_equal_the_in_process_loss",
    # the Voigtian + ARGUS pair under XLA (43.5 s, the Voigtian's trace): CI keeps the other five shape pairs
    "tests/test_jit.py::test_every_shape_and_binned_loss_compiles_to_the_same_numbers[voigt+argus]",
    # the amplitude model's compiled fit (54 s): CI keeps the amplitude loss under XLA (test_jit, value, gradient
    # and the mass check) and the compiled fit of 12 other models
    "tests/test_compiled_fit.py::test_compiled_fit_equals_migrad_hesse[amplitude]",
    # a yield at its limit under jit (20 s): CI keeps it in graph mode (eager and jit run in test-all)
    "tests/test_minimize.py::test_yield_fitted_at_its_lower_limit_is_a_valid_fit[jit-at-limit]",
    # a value above the limit refused under XLA (15 s): CI keeps NaN
    "tests/test_jit.py::test_value_at_refuses_bad_values_under_jit[above]",
    # (issue 26, CI at 1,329 s of its 1,500) the exact Hessian through the bridge's caches, eager against
    # numdifftools, traced and under XLA (60 s, mostly the second-order traces): CI keeps the same path on a line
    # shape through complex 1/z (test_jit's exact-caches case, eager, graph and XLA), a user's jacobian through a
    # model's caches (test_cached_tensor) and the FitMachine's exact compiled-Hessian draws
    "tests/test_amplitude_symbolic.py::test_exact_hessian_through_the_bridges_caches",
    # (2026-11-27, CI at 1,471 s of its 1,500) fused line shapes are opt-in: CI keeps fused_program's own tests
    # (value, gradient, Hessian eager and traced, pfor and while-loop jacobians, paused tapes, vectorized_map);
    # the bridged model fused against unfused in three modes (55 s, mostly second-order traces) runs in test-all
    *(f"tests/test_amplitude_fused.py::test_bridged_model_fused_equals_unfused_and_numdifftools[{m}]"
      for m in ("eager", "graph", "jit")),
    # the compiled Hessian of a line shape by differences (7 s): CI keeps its exact cases (after precompute and
    # through valid caches), which compile the same line shape, and the bridge's compiled Hessian by differences
    "tests/test_jit.py::test_jit_hessian_line_shapes_floating_equals_uncompiled[differences]",
    # the exact Hessian through valid caches, eager (9 s): CI keeps graph mode (the path that failed to build)
    "tests/test_loss.py::test_hessian_at_exact_through_valid_caches[eager]",
    # the JohnsonSU + KDE pair under XLA (11 s): CI keeps four other shape pairs; both shapes run in graph mode
    "tests/test_jit.py::test_every_shape_and_binned_loss_compiles_to_the_same_numbers[johnson+kde]",
    # one seed, batches of 8 and 3 against serial (20 s): CI keeps serial against batched studies with one seed
    # (test_batched_and_serial_toys_agree_near_a_yield_limit, test_a_dask_study_equals_the_one_in_process...)
    "tests/test_toys.py::test_the_same_seed_gives_the_same_datasets_whatever_the_batch",
    # a distributed loss's parts evaluated eagerly on the workers, for the chunked, simultaneous and constrained
    # kinds (52, 21, 19 s on 2 workers, 2026-12-01): CI keeps every kind traced and the unbinned kind eagerly
    *(f"tests/test_distributed.py::test_distributed_extended_parts_count_the_yield_term_once[{k}-eager]"
      for k in ("chunked", "simultaneous", "constrained")),
    # (issue 52, the suite at 1,130 s of tests after the inference package) the chunked, simultaneous and constrained
    # kinds traced (55, 14, 13 s): CI keeps the unbinned kind traced and eager and the extended distributed fit of
    # each kind (test_distributed_extended_fit_equals_the_in_process_fit)
    *(f"tests/test_distributed.py::test_distributed_extended_parts_count_the_yield_term_once[{k}-traced]"
      for k in ("chunked", "simultaneous", "constrained")),
    # two of four damages of a compile-cache entry (13, 11 s): CI keeps replaced and truncated, and the
    # CompileCacheMachine draws every kind
    "tests/test_compile_cache.py::test_untrusted_entry_is_never_loaded[unrecorded]",
    "tests/test_compile_cache.py::test_untrusted_entry_is_never_loaded[foreign]",
    # toys of a ToyCalculator on a Dask cluster equal the toys of one process (26 s): CI keeps run_toys' Dask study
    # (test_a_dask_study_equals_the_one_in_process_and_survives_a_dead_worker), whose chunking the toys reuse
    "tests/test_inference_toys.py::test_toys_on_dask_are_the_toys_of_one_process",
    # q0 of background-only toys against its half-chi2 distribution (13 s): CI keeps ToyCalculator.discovery's
    # doctest and the asymptotic discovery against closed forms
    "tests/test_inference_toys.py::test_discovery_from_q0_of_background_only_toys",
}


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items):
    """Mark the doctests named in ``SLOW_DOCTESTS`` slow (a doctest has no decorator to carry the mark), and the
    tests named in ``EXHAUSTIVE`` exhaustive (and slow)."""
    for item in items:
        if item.nodeid in SLOW_DOCTESTS:
            item.add_marker(pytest.mark.slow)
        if item.nodeid in EXHAUSTIVE:
            item.add_marker(pytest.mark.exhaustive)
            item.add_marker(pytest.mark.slow)
    # A listed id that matches nothing (a renamed test or case) would silently move a costly test back into
    # `make test`: every listed id of a file that was collected whole must be among the collected items.
    if items and not any("::" in str(arg) for arg in items[0].config.args):
        ids = {item.nodeid for item in items}
        files = {nodeid.split("::")[0] for nodeid in ids}
        stale = sorted(n for n in SLOW_DOCTESTS | EXHAUSTIVE if n.split("::")[0] in files and n not in ids)
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
