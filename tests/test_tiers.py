"""zcache._fitting.tiers: Minuit's tiered start (issue 54).

The first two fits of a loss and fitted set are MIGRAD's (traced value + gradient, Hessians by differences of exact
gradients), the second with the compiled program built on a thread meanwhile; every later fit is compiled. The reference for
the numbers is the other tier on the same loss from the same start: both must find the same minimum within the
fit's tolerance, the same errors and the same verdict, on unbinned, extended, binned, weighted, constrained and
simultaneous losses. The mechanics: which tier serves a fit depends on the fits before it only, a fit waits for no
build it does not need, a script that fits once starts none, a build's errors are refusals or raised, a build writes
no cache while the foreground changes inputs, no thread outlives a build.
"""

from __future__ import annotations

import functools
import gc
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
import test_compiled_fit as zoo

import zcache
from zcache._engine import cache_state
from zcache._fitting import tiers
from zcache._fitting.compiled_fit import CompiledFit
from zcache.minimize import Minuit as _Minuit
from zcache.minimize import wait_for_builds

# the tiered start is the default; every Minuit here still asks for it, unless the test says tiered=False
Minuit = functools.partial(_Minuit, tiered=True)

#: MIGRAD's EDM bound at the default tol=0.1: each tier's minimum is within sqrt(2 EDM) < 0.015 errors of the true
#: one along the worst direction (EDM = 1/2 d^T V^-1 d for a distance d in errors, V the covariance), so the two
#: within twice that; the errors (2 errordef H^-1, by central or forward differences of exact gradients) differ
#: only through that shift and the differences' rounding.
SHIFT = 0.03
ERRORS_RTOL = 2e-3


def _builds_alive() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("zcache-build") and t.is_alive()]


@pytest.mark.parametrize("name", [
    "gauss", "gauss_exp", "binned",
    *(pytest.param(n, marks=pytest.mark.slow) for n in ("weighted", "constrained", "simultaneous", "binned_extended")),
])
def test_the_tiers_give_the_same_minimum_errors_and_verdict(name):
    loss, params = zoo.ZOO[name](f"tier_{name}")
    fitted = list(loss.params if params is None else params)
    start = np.array([float(p) for p in fitted])
    first = Minuit().minimize(loss, params)
    assert first.path == "migrad" and first.fallback is None
    zcache.set_values(fitted, start)
    again = Minuit().minimize(loss, params)  # the cheap tier again, the program built meanwhile
    assert again.path == "migrad"
    # the same tier from the same start: the same numbers to the last bit (the build beside it changes none)
    assert again.values == first.values and again.errors == first.errors and again.fmin == first.fmin
    zcache.set_values(fitted, start)
    second = Minuit().minimize(loss, params)  # no wait: it waits for the build itself
    assert second.path == "compiled" and second.fallback is None, second.fallback
    assert first.valid and second.valid
    errors = np.array([second.errors[n] for n in second.names])
    shift = np.array([first.values[n] - second.values[n] for n in second.names]) / errors
    assert np.max(np.abs(shift)) <= SHIFT, dict(zip(second.names, shift, strict=True))
    np.testing.assert_allclose([first.errors[n] for n in second.names], errors, rtol=ERRORS_RTOL)
    assert abs(first.fmin - second.fmin) <= SHIFT**2 * loss.errordef
    np.testing.assert_array_equal([float(p) for p in fitted], [second.values[n] for n in second.names])
    # the covariance in units of the errors (a correlation-like matrix): the same on both tiers
    scale = np.outer(errors, errors)
    np.testing.assert_allclose(first.covariance / scale, second.covariance / scale, rtol=0, atol=5 * ERRORS_RTOL)
    assert first.weightcorr == second.weightcorr


@pytest.mark.slow  # about 1.9 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times")
def test_which_tier_serves_a_fit_depends_on_the_fits_before_it_only(monkeypatch):
    """The second fit starts the build and does not wait for it; the third waits: never chosen by the clock."""
    loss, _ = zoo.gauss("tier_order")
    start = [float(p) for p in loss.params]
    go = threading.Event()
    real = CompiledFit.builder

    def slow_builder(self, *args, **kwargs):
        work = real(self, *args, **kwargs)

        def held() -> None:
            go.wait()
            work()

        return held

    monkeypatch.setattr(CompiledFit, "builder", slow_builder)
    first = Minuit().minimize(loss)
    assert first.path == "migrad"
    assert not _builds_alive()  # one fit builds nothing: a script that fits once pays no program
    zcache.set_values(loss.params, start)
    assert Minuit().minimize(loss).path == "migrad"  # the build held: this fit did not wait for it
    assert wait_for_builds(timeout=0.05) is False  # the build waits for go
    threading.Timer(0.2, go.set).start()
    zcache.set_values(loss.params, start)
    second = Minuit().minimize(loss)  # waits for the build, then compiled
    assert second.path == "compiled"
    assert wait_for_builds() is True
    assert not _builds_alive()
    zcache.set_values(loss.params, start)
    assert Minuit().minimize(loss).path == "compiled"
    # another fitted set of the same loss starts its own tiers
    mu = next(p for p in loss.params if p.name.startswith("mu"))
    assert [Minuit().minimize(loss, [mu]).path for _ in range(3)] == ["migrad", "migrad", "compiled"]


def test_an_untiered_fit_during_a_build_waits_for_it_and_traces_nothing(monkeypatch):
    loss, _ = zoo.gauss("tier_untiered")
    start = [float(p) for p in loss.params]
    go = threading.Event()
    real = CompiledFit.builder

    def held_builder(self, *args, **kwargs):
        work = real(self, *args, **kwargs)

        def held() -> None:
            go.wait()
            work()

        return held

    monkeypatch.setattr(CompiledFit, "builder", held_builder)
    assert Minuit().minimize(loss).path == "migrad"
    zcache.set_values(loss.params, start)
    assert Minuit().minimize(loss).path == "migrad"  # starts the build
    threading.Timer(0.2, go.set).start()
    zcache.set_values(loss.params, start)
    assert Minuit(tiered=False).minimize(loss).path == "compiled"
    assert CompiledFit.of(loss, list(loss.params)).traces == 1  # the build's trace, not a second one
    assert not _builds_alive()


@pytest.mark.slow  # about 1.8 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times")
def test_options_that_skip_the_tiers():
    loss, _ = zoo.gauss("tier_skip")
    assert Minuit(tiered=False).minimize(loss).path == "compiled"  # traced in the foreground, as before
    assert not _builds_alive()
    # a program traced already serves the first tiered fit too
    assert Minuit().minimize(loss).path == "compiled"
    other, _ = zoo.gauss("tier_skip2")
    assert Minuit(compiled=False).minimize(other).path == "migrad"
    assert not _builds_alive()  # nothing to build for MIGRAD alone
    assert repr(_Minuit()).endswith("tiered=True)") and repr(_Minuit(tiered=False)).endswith("tiered=False)")


@pytest.mark.parametrize("error, refused", [(ValueError("no vector for this loss"), True),
                                            (RuntimeError("a bug in the build"), False)])
def test_a_builds_error_refuses_the_loss_or_is_raised_by_the_next_fit(monkeypatch, error, refused):
    loss, _ = zoo.gauss(f"tier_error_{refused}")
    start = [float(p) for p in loss.params]

    def failing_builder(self, *args, **kwargs):
        def work() -> None:
            raise error

        return work

    monkeypatch.setattr(CompiledFit, "builder", failing_builder)
    first = Minuit().minimize(loss)
    assert first.path == "migrad" and first.valid
    zcache.set_values(loss.params, start)
    assert Minuit().minimize(loss).path == "migrad"  # starts the build, which fails
    wait_for_builds()
    zcache.set_values(loss.params, start)
    if refused:  # as a trace in the foreground: MIGRAD fits it, and says why
        second = Minuit().minimize(loss)
        assert second.path == "migrad"
        assert second.fallback == "compiled fit: refused (ValueError: no vector for this loss)"
        assert CompiledFit.of(loss, list(loss.params)).refused == "ValueError: no vector for this loss"
    else:  # never lost: raised where the program is needed, before any parameter moved
        with pytest.raises(RuntimeError, match="a bug in the build"):
            Minuit().minimize(loss)
        assert [float(p) for p in loss.params] == start
        assert Minuit().minimize(loss).path == "compiled"  # raised once; the next fit traces itself


@pytest.mark.slow  # about 2.7 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times")
def test_a_build_writes_no_cache_while_the_foreground_changes_inputs(monkeypatch):
    """The foreground moves parameters and data while the program is traced and called on the build's thread."""
    loss, _ = zoo.gauss_exp("tier_race")
    twin, _ = zoo.gauss_exp("tier_race_twin")
    start = [float(p) for p in loss.params]
    data = loss.data
    original = np.array(data.value())
    writers: list[str] = []
    store = cache_state.CacheState.store_eagerly

    def recorded(self, out):
        writers.append(threading.current_thread().name)
        return store(self, out)

    monkeypatch.setattr(cache_state.CacheState, "store_eagerly", recorded)
    go = threading.Event()
    real = CompiledFit.builder

    def held_builder(self, *args, **kwargs):
        work = real(self, *args, **kwargs)

        def held() -> None:
            go.wait()
            work()

        return held

    monkeypatch.setattr(CompiledFit, "builder", held_builder)
    assert Minuit().minimize(loss).path == "migrad"
    zcache.set_values(loss.params, start)
    assert Minuit().minimize(loss).path == "migrad"  # the build starts, held until go
    writers.clear()
    go.set()
    rng = np.random.default_rng(0)
    while _builds_alive():
        assert gc.get_freeze_count() == 0  # the build leaves the user's collector alone
        zcache.set_values(loss.params, np.array(start) * rng.uniform(0.95, 1.05, len(start)))
        data.set_data(rng.permutation(original))
        loss.value()
    assert wait_for_builds() is True
    assert not any(w.startswith("zcache-build") for w in writers), writers
    data.set_data(original)
    zcache.set_values(loss.params, start)
    second = Minuit().minimize(loss)
    assert second.path == "compiled"
    zcache.set_values(twin.params, start)
    reference = Minuit(tiered=False).minimize(twin)
    np.testing.assert_allclose([second.values[n] for n in second.names],
                               [reference.values[n.replace("tier_race", "tier_race_twin")] for n in second.names],
                               rtol=1e-12, atol=1e-12)


@pytest.mark.exhaustive  # CI's 25 minutes: an XLA compile
def test_under_xla_the_first_fit_stays_compiled():
    loss, _ = zoo.gauss("tier_jit")
    with zcache.set_jit_mode("auto"):
        assert Minuit().minimize(loss).path == "compiled"
    assert not _builds_alive()


@pytest.mark.exhaustive  # CI's 25 minutes: a fresh process imports TensorFlow
def test_a_process_that_ends_during_a_build_waits_for_it_and_exits_cleanly(tmp_path):
    script = textwrap.dedent("""
        import numpy as np, zcache
        from zcache.loss import UnbinnedNLL
        from zcache.minimize import Minuit
        from zcache.models import Gaussian, Space
        mu = zcache.Parameter("mu", 0.4, lower=-2.0, upper=2.0)
        loss = UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, 1.0), zcache.Data(np.random.default_rng(1).normal(0, 1, 500)))
        from zcache._fitting import tiers
        def building():  # a build started (ended or not: it is kept until a fit looks at it)
            return sum(len(per) for per in tiers._BUILDS.values()) > 0
        print(Minuit(tiered=True).minimize(loss).path, building())
        mu.set_value(0.4)
        print(Minuit(tiered=True).minimize(loss).path, building())
    """)
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    # one fit started no build; the second did, and the exit waited for it
    assert done.stdout.split() == ["migrad", "False", "migrad", "True"]


def test_refusal_reads_like_the_foregrounds():
    assert tiers.refusal(ValueError("first line\nsecond")) == "ValueError: first line"
    assert tiers.refusal(TypeError()) == "TypeError: "
