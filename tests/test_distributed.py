"""zcache.scale.DistributedLoss (issue 28): a likelihood whose events live on Dask workers.

One 2-worker LocalCluster for the session (tests/conftest.py's ``dask_client``); a Gauss + Exp model whose
~6000 events are read by each part from a .npy file (a part is ``(path, start, stop)``, whose loss is a two-chunk ChunkedLoss) or
shipped as an array (an UnbinnedNLL). Issue 51: extended parts (ExtendedUnbinnedNLL, ChunkedLoss(extended=True),
a constrained loss, a SimultaneousLoss of extended channels) whose whole-sample terms are counted once.
"""

from __future__ import annotations

import os
import signal
import threading

import numpy as np
import pytest
from helpers import wait_for_replaced_worker

import zcache
from zcache.exceptions import DataRangeError, ModelError, WholeSampleTermError
from zcache.minimize import Minuit

distributed = pytest.importorskip("distributed")

from zcache.scale import DistributedLoss  # noqa: E402

START = {"mu": 5.2, "sigma": 0.8, "lam": -0.25, "frac": 0.35}
NAMES = tuple(START)


def gauss_exp(events):
    """The loss of ``events`` (an array or a ``(path, start, stop)`` spec): built on a worker or here."""
    from zcache.loss import UnbinnedNLL
    from zcache.models import Exponential, Gaussian, Space, SumPdf

    s = Space("x", 0.0, 10.0)
    mu = zcache.Parameter("mu", START["mu"], lower=3.0, upper=7.0)
    sigma = zcache.Parameter("sigma", START["sigma"], lower=0.1, upper=3.0)
    lam = zcache.Parameter("lam", START["lam"], lower=-2.0, upper=-0.01)
    frac = zcache.Parameter("frac", START["frac"], lower=0.0, upper=1.0)
    model = SumPdf([Gaussian(s, mu, sigma), Exponential(s, lam)], fracs=[frac])
    if isinstance(events, tuple):  # a range of the file, read on the worker in two chunks (the large-fit path)
        from zcache.scale import ChunkedLoss, Chunks

        path, start, stop = events
        # exact_hessian: the module compares Hessians with the in-process loss's exact one to 1e-10
        return ChunkedLoss(model, Chunks.from_npy(path, (stop - start + 1) // 2, start=start, stop=stop),
                           exact_hessian=True)
    return UnbinnedNLL(model, zcache.Data(np.array(events)))


def not_a_loss(part):
    return part


def other_parameters(part):
    """Part 1 fits a Gaussian only: parameters differ between parts."""
    from zcache.loss import UnbinnedNLL
    from zcache.models import Gaussian, Space

    spec, gaussian_only = part
    if not gaussian_only:
        return gauss_exp(spec)
    return UnbinnedNLL(Gaussian(Space("x", 0.0, 10.0), zcache.Parameter("mu", 5.0), 1.0),
                       zcache.Data(np.linspace(1.0, 9.0, 10)))


@pytest.fixture(scope="module")
def client(dask_client):
    """The session's 2-worker LocalCluster (tests/conftest.py), shared with test_toys.py."""
    return dask_client


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    """All events, and 3 parts: an array (scattered) and two ``(path, start, stop)`` specs of a .npy file."""
    rng = np.random.default_rng(3)
    ev = np.concatenate([rng.normal(5.0, 0.7, 1500), rng.exponential(4.0, 5000)])
    ev = ev[(ev > 0.0) & (ev < 10.0)]
    path = tmp_path_factory.mktemp("distributed") / "events.npy"
    np.save(path, ev)
    a, b = len(ev) // 3, 2 * len(ev) // 3
    return ev, [ev[:a].copy(), (str(path), a, b), (str(path), b, len(ev))]


@pytest.fixture(scope="module")
def loss(client, events):
    with DistributedLoss(gauss_exp, events[1], client, name="three parts") as loss:
        loss.objective()  # the parts precompute before their first trace (a fit's first call would)
        yield loss


@pytest.fixture(scope="module")
def local(events):
    """The same loss on all events in this process."""
    loss = gauss_exp(events[0])
    zcache.precompute(loss)
    return loss


def by_name(loss):
    return {p.name: p for p in loss.get_params(floating=None)}


# exhaustive (the cluster's start): make test keeps the distributed fit, whose values, errors (from the summed
# Hessians) and fmin equal the in-process fit's, and the killed-worker fit
@pytest.mark.exhaustive
def test_value_gradient_and_hessian_equal_the_in_process_loss(loss, local):
    assert [p.name for p in loss.params] == [p.name for p in local.params]
    assert loss.datasets() == [] and loss.evaluates_in_parts and not local.evaluates_in_parts
    x = np.array([{"mu": 5.1, "sigma": 0.7, "lam": -0.3, "frac": 0.3}[p.name] for p in local.params])
    np.testing.assert_allclose(float(loss.value_at(x, offset=100.0)), float(local.value_at(x, offset=100.0)),
                               rtol=1e-10)
    v, g = loss.value_gradient_at(x)
    v_local, g_local = local.value_gradient_at(x)
    np.testing.assert_allclose(float(v), float(v_local), rtol=1e-10)
    np.testing.assert_allclose(g.numpy(), g_local.numpy(), rtol=1e-10)
    assert [float(p) for p in loss.params] == x.tolist()  # the client's parameters are left at x
    # Exact Hessians on both sides (precomputed), summed over the parts here.
    np.testing.assert_allclose(loss.hessian_at(x).numpy(), local.hessian_at(x).numpy(), rtol=1e-10)
    np.testing.assert_allclose(float(loss.value()), float(local.value()), rtol=1e-10)
    stats = loss.stats.per_call()
    assert stats["calls"] == 5 and 0 < stats["bytes_sent"] < 2000 and 0 < stats["bytes_received"] < 2000


@pytest.mark.slow  # about 12 CPU seconds with its Dask cluster (CONTRIBUTING.md, "Test times")
def test_a_fit_equals_the_in_process_fit_with_fixed_and_toggled_parameters(loss, local):
    remote, here = by_name(loss), by_name(local)

    def both_fit(**start):
        for name in NAMES:  # the same start
            remote[name].set_value(start.get(name, START[name]))
            here[name].set_value(start.get(name, START[name]))
        fit = Minuit().minimize(loss)
        fit_local = Minuit(compiled=False).minimize(local)  # the distributed fit is MIGRAD's
        assert fit.path == "migrad" and fit.valid and fit_local.valid
        assert fit.values.keys() == fit_local.values.keys()
        for name in fit.values:
            assert fit.values[name] == pytest.approx(fit_local.values[name], rel=1e-8, abs=1e-10), name
            assert fit.errors[name] == pytest.approx(fit_local.errors[name], rel=1e-8), name
        assert fit.fmin == pytest.approx(fit_local.fmin, rel=1e-10)
        return fit

    free = both_fit()
    # A fixed parameter moved on the client reaches the workers; a toggled flag changes the fit.
    for p in (remote["sigma"], here["sigma"]):
        p.floating = False
    fixed = both_fit(sigma=0.75)
    assert "sigma" not in fixed.values and fixed.values["mu"] != free.values["mu"]
    for p in (remote["sigma"], here["sigma"]):
        p.floating = True
    for name in NAMES:
        remote[name].set_value(START[name])
    again = Minuit().minimize(loss)
    assert again.values == pytest.approx(free.values, rel=1e-8) and again.errors == pytest.approx(free.errors, rel=1e-8)
    minos = free.minos("mu")["mu"]  # through value_at, in the fit's state
    assert minos.valid and minos.lower < 0 < minos.upper


@pytest.mark.slow  # the Dask cluster: its start and workers cost 25-40 CPU s of the fast loop (CONTRIBUTING.md, "Test times")
def test_close_drops_the_parts_from_the_workers(client, events):
    from zcache.scale import _distributed as zd

    loss = DistributedLoss(gauss_exp, events[1][1:], client)
    token = loss._token

    def count(token):
        from zcache.scale import _distributed as zd

        return sum(k[0] == token for k in zd._PARTS)

    assert sum(client.run(count, token).values()) == 2
    loss.close()
    assert sum(client.run(count, token).values()) == 0
    assert zd._PARTS == {}  # nothing was built in the client


@pytest.mark.slow  # the Dask cluster: its start and workers cost 25-40 CPU s of the fast loop (CONTRIBUTING.md, "Test times")
def test_named_errors(client, loss, events):
    with pytest.raises(ModelError, match="not its parameters"):
        loss.value_at([5.0], [zcache.Parameter("mu", 5.0)])
    with pytest.raises(ModelError, match=r"part 0 has no parameter\(s\) \['nu'\]"):  # the workers check names too
        loss._call(("value", ["nu"], np.array([1.0]), ["nu"], None))
    with pytest.raises(ModelError, match="must return a zcache loss"):
        DistributedLoss(not_a_loss, [np.zeros(3)], client)
    lock = threading.Lock()
    with pytest.raises(ModelError, match="cannot be sent to the workers"):
        DistributedLoss(lambda part: (lock, part), [np.zeros(3)], client)
    with pytest.raises(ModelError, match="same parameters"):
        DistributedLoss(other_parameters, [(events[1][1], False), (events[1][2], True)], client)
    with pytest.raises(DataRangeError, match="outside"):  # a part's own error, as raised on the worker
        DistributedLoss(gauss_exp, [np.array([1.0, 11.0])], client)
    with pytest.raises(ModelError, match="at least one part"):
        DistributedLoss(gauss_exp, [], client)


@pytest.mark.slow  # about 29 CPU seconds (CONTRIBUTING.md, "Test times")
def test_a_worker_killed_mid_fit_is_replaced_and_the_fit_unchanged(client, loss):
    """The worker holding part 0 (an array) and part 2 (a file spec) is killed at the fit's 3rd
    call: the parts are rebuilt elsewhere (the array scattered again from the client's copy) and
    the result is the unkilled fit's."""
    for p in loss.get_params(floating=None):
        p.set_value(START[p.name])
    reference = Minuit().minimize(loss)
    for p in loss.get_params(floating=None):
        p.set_value(START[p.name])
    victim = client.run(os.getpid)[loss._where[0]]
    calls = []
    fit_call = loss.value_gradient_at

    def kill_at_third_call(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            os.kill(victim, signal.SIGKILL)
        return fit_call(*args, **kwargs)

    loss.value_gradient_at = kill_at_third_call
    workers = set(client.scheduler_info()["workers"])
    try:
        fit = Minuit().minimize(loss)
    finally:
        del loss.value_gradient_at
        if len(calls) >= 3:
            wait_for_replaced_worker(client, workers)  # the cluster is the session's: two workers again
    assert len(calls) > 3 and loss.stats.rebuilt >= 2 and victim not in client.run(os.getpid).values()
    assert fit.valid
    for name in reference.values:
        assert fit.values[name] == pytest.approx(reference.values[name], rel=1e-10, abs=1e-12), name
        assert fit.errors[name] == pytest.approx(reference.errors[name], rel=1e-10), name


# -- extended parts: the whole-sample terms (the yield, constraints) are counted once (issue 51) ----------------
EXT_START = {"mu": 5.2, "sigma": 0.8, "lam": -0.25, "nsig": 600.0, "nbkg": 1200.0, "nside": 300.0}


def extended_gauss_exp(spec):
    """An extended Gauss + Exp loss of one part (built on a worker) or of all events (here).

    ``spec = (kind, events, side)``: kind ``"unbinned"`` (an ExtendedUnbinnedNLL of an array),
    ``"chunked"`` (a ``ChunkedLoss(extended=True)`` of two chunks), ``"constrained"`` (the
    unbinned loss with a Gaussian constraint on mu) or ``"simultaneous"`` (a SimultaneousLoss of
    the unbinned loss and an extended Exponential of the ``side`` events, yield ``nside``).
    """
    from zcache.loss import ExtendedUnbinnedNLL, GaussianConstraint, SimultaneousLoss
    from zcache.models import Exponential, Gaussian, Space, SumPdf

    kind, events, side = spec
    s = Space("x", 0.0, 10.0)
    p = {n: zcache.Parameter(n, EXT_START[n], lower=lo, upper=hi) for n, lo, hi in
         [("mu", 3.0, 7.0), ("sigma", 0.1, 3.0), ("lam", -2.0, -0.01), ("nsig", 0.0, 5000.0), ("nbkg", 0.0, 5000.0)]}
    model = SumPdf([Gaussian(s, p["mu"], p["sigma"]), Exponential(s, p["lam"])], yields=[p["nsig"], p["nbkg"]])
    data = zcache.Data(np.array(events))
    if kind == "chunked":
        from zcache.scale import ChunkedLoss, Chunks

        return ChunkedLoss(model, Chunks.from_array(np.array(events), (len(events) + 1) // 2), extended=True,
                           exact_hessian=True)
    if kind == "constrained":
        return ExtendedUnbinnedNLL(model, data, constraints=[GaussianConstraint([p["mu"]], [5.0], [0.05])])
    main = ExtendedUnbinnedNLL(model, data)
    if kind == "unbinned":
        return main
    nside = zcache.Parameter("nside", EXT_START["nside"], lower=0.0, upper=5000.0)
    other = Exponential(Space("y", 0.0, 10.0), p["lam"], extended=nside)
    return SimultaneousLoss([main, ExtendedUnbinnedNLL(other, zcache.Data(np.array(side), obs="y"))])


def binned_part(events):
    from zcache.binned import BinnedData, ExtendedBinnedNLL
    from zcache.models import Exponential, Space

    counts, edges = np.histogram(events, bins=10, range=(0.0, 10.0))
    nu = zcache.Parameter("nu", 100.0, lower=0.0)
    return ExtendedBinnedNLL(Exponential(Space("x", 0.0, 10.0), -0.2, extended=nu), BinnedData(counts, edges))


def extended_in_part_zero_only(spec):
    """Part 0 extended, the others not: their whole-sample terms differ."""
    from zcache.loss import UnbinnedNLL

    index, events = spec
    loss = extended_gauss_exp(("unbinned", events, None))
    return loss if index == 0 else UnbinnedNLL(loss.model, loss.data)


def constrained_with(spec):
    """A constraint on mu whose width is drawn per part: parts that disagree on it."""
    from zcache.loss import ExtendedUnbinnedNLL, GaussianConstraint

    width, events = spec
    loss = extended_gauss_exp(("unbinned", events, None))
    mu = by_name(loss)["mu"]
    return ExtendedUnbinnedNLL(loss.model, loss.data, constraints=[GaussianConstraint([mu], [5.0], [width])])


@pytest.fixture(scope="module")
def extended_events():
    """The report's case: 1948 events of an extended Gauss + Exp, two parts of 974; 600 side events."""
    rng = np.random.default_rng(51)
    ev = np.concatenate([rng.normal(5.0, 0.7, 700), rng.exponential(4.0, 1500)])
    ev = rng.permutation(ev[(ev > 0.0) & (ev < 10.0)])[:1948]
    side = rng.exponential(3.0, 700)
    side = side[side < 10.0][:600]
    assert len(ev) == 1948 and len(side) == 600
    return ev, side


def split_spec(kind, events, side, k):
    return [(kind, e, s) for e, s in zip(np.array_split(events, k), np.array_split(side, k), strict=True)]


# chunked is exhaustive: make test keeps the other three parts' fits; chunked parts' values and gradients are
# test_whole_sample_terms_leave_a_sum_over_events[chunked]'s, and a chunked loss's fit test_chunks.py's
@pytest.fixture(scope="module", params=["unbinned", pytest.param("chunked", marks=pytest.mark.exhaustive),
                                        *(pytest.param(k, marks=pytest.mark.slow) for k in ("constrained", "simultaneous"))])
def extended_pair(request, client, extended_events):
    """A DistributedLoss of two (three for 'chunked') extended parts and the same loss of all events here."""
    ev, side = extended_events
    kind = request.param
    parts = split_spec(kind, ev, side, 3 if kind == "chunked" else 2)
    with DistributedLoss(extended_gauss_exp, parts, client, name=f"extended {kind}") as loss:
        local = extended_gauss_exp((kind, ev, side))
        zcache.precompute(local)
        yield kind, loss, local


def at_point(loss, **values):
    return np.array([{**EXT_START, "mu": 5.1, "sigma": 0.7, "lam": -0.3, "nsig": 650.0, "nbkg": 1250.0,
                      "nside": 580.0, **values}[p.name] for p in loss.params])


# the chunked, simultaneous and constrained kinds, traced and eager, are exhaustive: make test keeps the unbinned
# kind traced and eager and the extended distributed fit of each kind (test_distributed_extended_fit_equals_...);
# extended_pair's own parameters, in its order (so that the module-scoped losses are shared with that test)
@pytest.mark.slow  # the Dask cluster: its start and workers cost 25-40 CPU s of the fast loop (CONTRIBUTING.md, "Test times")
@pytest.mark.parametrize("graph", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["traced", "eager"])
@pytest.mark.parametrize("extended_pair", ["unbinned", *(pytest.param(k, marks=pytest.mark.exhaustive)
                                                         for k in ("chunked", "constrained", "simultaneous"))],
                         indirect=True, scope="module")
def test_distributed_extended_parts_count_the_yield_term_once(client, extended_pair, graph):
    """value, value_at, value_gradient_at, hessian_at and objective(...) equal the loss of all events in one
    process (the yields' Poisson term nu - N log nu once, not K nu - N log nu), with the parts' models traced
    or eager on the workers."""
    kind, loss, local = extended_pair
    previous = client.run(zcache.get_graph_mode)
    client.run(zcache.set_graph_mode, graph)
    try:
        assert [p.name for p in loss.params] == [p.name for p in local.params]
        for name, p in by_name(loss).items():  # the same start on both sides
            by_name(local)[name].set_value(float(p))
        np.testing.assert_allclose(float(loss.value()), float(local.value()), rtol=1e-10)
        for x in (at_point(loss), at_point(loss, nsig=500.0, nbkg=1400.0, mu=4.9)):
            np.testing.assert_allclose(float(loss.value_at(x, offset=10.0)), float(local.value_at(x, offset=10.0)),
                                       rtol=1e-10)
            v, g = loss.value_gradient_at(x)
            v_local, g_local = local.value_gradient_at(x)
            np.testing.assert_allclose(float(v), float(v_local), rtol=1e-10)
            np.testing.assert_allclose(g.numpy(), g_local.numpy(), rtol=1e-9, atol=1e-9 * np.abs(g_local.numpy()).max())
            np.testing.assert_allclose(loss.hessian_at(x).numpy(), local.hessian_at(x).numpy(), rtol=1e-9,
                                       atol=1e-12)
        objective, objective_local = loss.objective(), local.objective()
        assert objective.value(objective.start) == objective_local.value(objective_local.start) == 0.0  # offsets
        assert objective.offset == pytest.approx(objective_local.offset, rel=1e-10)
        x = at_point(loss, lam=-0.28)
        (v, g), (v_local, g_local) = objective.value_gradient(x), objective_local.value_gradient(x)
        assert v == pytest.approx(v_local, rel=1e-8, abs=1e-9)  # differences of order 10 after the offset
        np.testing.assert_allclose(g, g_local, rtol=1e-9, atol=1e-9 * np.abs(g_local).max())
        np.testing.assert_allclose(objective.hessian(x), objective_local.hessian(x), rtol=1e-9, atol=1e-12)
    finally:
        client.run(zcache.set_graph_mode, previous[next(iter(previous))])


@pytest.mark.slow  # the Dask cluster: its start and workers cost 25-40 CPU s of the fast loop (CONTRIBUTING.md, "Test times")
def test_distributed_extended_fit_equals_the_in_process_fit(extended_pair):
    """The report's fit (two parts of 974 events): MIGRAD on the parts equals MIGRAD on all events here, and the
    fitted yields add up to the events (the extended MLE), not to half of them."""
    kind, loss, local = extended_pair
    remote, here = by_name(loss), by_name(local)
    for name, p in remote.items():
        p.set_value(EXT_START[name])
        here[name].set_value(EXT_START[name])
    fit = Minuit().minimize(loss)
    fit_local = Minuit(compiled=False).minimize(local)
    assert fit.path == "migrad" and fit.valid and fit_local.valid
    assert fit.values.keys() == fit_local.values.keys()
    for name in fit.values:
        assert fit.values[name] == pytest.approx(fit_local.values[name], rel=1e-8, abs=1e-10), name
        assert fit.errors[name] == pytest.approx(fit_local.errors[name], rel=1e-7), name
    assert fit.fmin == pytest.approx(fit_local.fmin, rel=1e-10)
    # the extended MLE puts the total yield at the number of events (+- a small fraction of its error)
    assert fit.values["nsig"] + fit.values["nbkg"] == pytest.approx(1948.0, abs=0.05 * np.sqrt(1948.0))
    if kind == "simultaneous":
        assert fit.values["nside"] == pytest.approx(600.0, abs=0.05 * np.sqrt(600.0))
    compiled = Minuit().minimize(local)  # the default in-process path (one compiled program): the same minimum
    for name in fit.values:
        assert fit.values[name] == pytest.approx(compiled.values[name], abs=2e-3 * fit.errors[name]), name


# one kind is enough, the protocol is the same: only the unbinned pair (the other kinds were skipped inside the test,
# after their pair was built on the workers, which a pytest-xdist process that ran none of their other tests paid for)
@pytest.mark.slow  # about 13 CPU seconds (CONTRIBUTING.md, "Test times")
@pytest.mark.parametrize("extended_pair", ["unbinned"], indirect=True, scope="module")
def test_distributed_extended_parts_survive_the_loss_of_the_worker_holding_the_yield_term(client, extended_pair):
    """Part 0 answers for the whole-sample terms: killed with its worker between two calls, it is rebuilt
    elsewhere and the next call's value and gradient are those before (the yield term still once)."""
    kind, loss, local = extended_pair
    assert kind == "unbinned"
    x = at_point(loss)
    v, g = loss.value_gradient_at(x)
    rebuilt = loss.stats.rebuilt
    victim = client.run(os.getpid)[loss._where[0]]
    workers = set(client.scheduler_info()["workers"])
    os.kill(victim, signal.SIGKILL)
    try:
        v_after, g_after = loss.value_gradient_at(x)
    finally:
        wait_for_replaced_worker(client, workers)  # the cluster is the session's: two workers again
    assert loss.stats.rebuilt > rebuilt
    assert float(v_after) == float(v) and np.array_equal(g_after.numpy(), g.numpy())
    np.testing.assert_allclose(float(v_after), float(local.value_gradient_at(x)[0]), rtol=1e-10)


def count_parts():
    from zcache.scale import _distributed as zd

    return len(zd._PARTS)


@pytest.mark.slow  # the Dask cluster: its start and workers cost 25-40 CPU s of the fast loop (CONTRIBUTING.md, "Test times")
def test_distributed_refuses_parts_whose_whole_sample_terms_differ_or_cannot_be_split(client, extended_events):
    ev, _ = extended_events
    halves = np.array_split(ev, 2)
    held = sum(client.run(count_parts).values())
    with pytest.raises(WholeSampleTermError, match="part 0: ExtendedBinnedNLL is a function of the whole histogram"):
        DistributedLoss(binned_part, halves, client)
    with pytest.raises(WholeSampleTermError, match="part 1 has no whole-sample terms"):
        DistributedLoss(extended_in_part_zero_only, list(enumerate(halves)), client)
    with pytest.raises(WholeSampleTermError, match="part 1's whole-sample terms"):
        DistributedLoss(constrained_with, [(0.05, halves[0]), (0.1, halves[1])], client)
    assert sum(client.run(count_parts).values()) == held  # nothing of the refused losses stays on the workers
    with pytest.raises(WholeSampleTermError, match="ExtendedBinnedNLL is a function of the whole histogram"):
        binned_part(ev).whole_sample_terms()


@pytest.mark.parametrize("kind", ["unbinned", "chunked", "constrained", "simultaneous"])
def test_whole_sample_terms_leave_a_sum_over_events(kind, extended_events):
    """In one process, no cluster: each half's loss less its whole-sample terms, summed, plus the terms once, is the
    loss of all events (value and gradient), and the terms are the yields and constraints."""
    ev, side = extended_events
    whole = extended_gauss_exp((kind, ev, side))
    halves = [extended_gauss_exp(spec) for spec in split_spec(kind, ev, side, 2)]
    losses = [whole, *halves]
    point = {"mu": 5.1, "sigma": 0.7, "lam": -0.3, "nsig": 650.0, "nbkg": 1250.0, "nside": 580.0}
    for loss in losses:
        for p in loss.get_params(floating=None):
            p.set_value(point[p.name])
    terms = [[float(t()) for t in loss.whole_sample_terms()] for loss in losses]
    expected = {"unbinned": [1900.0], "chunked": [1900.0], "constrained": [1900.0, 0.5 * (0.1 / 0.05) ** 2],
                "simultaneous": [1900.0, 580.0]}[kind]
    assert all(t == pytest.approx(expected, rel=1e-12) for t in terms)
    split = sum(float(h.value()) - sum(t) for h, t in zip(halves, terms[1:], strict=True)) + sum(terms[0])
    assert split == pytest.approx(float(whole.value()), rel=1e-12)
    assert sum(float(h.value()) for h in halves) != pytest.approx(float(whole.value()), rel=1e-3)  # the bug's sum


@pytest.mark.slow  # about 51 CPU seconds (CONTRIBUTING.md, "Test times")
def test_binned_and_template_losses_have_no_whole_sample_split():
    from zcache.binned import BinnedData, BinnedNLL, Template
    from zcache.loss import SimultaneousLoss
    from zcache.models import Exponential, Space

    h = BinnedData([10.0, 20.0], [0.0, 5.0, 10.0])
    binned = BinnedNLL(Exponential(Space("x", 0.0, 10.0), -0.2), h)
    template = Template(h, [[5.0, 1.0], [1.0, 5.0]])
    unbinned = gauss_exp(np.array([4.0, 5.0, 6.0]))
    for loss in (binned, template, SimultaneousLoss([unbinned, binned])):
        with pytest.raises(WholeSampleTermError, match="not a sum over events plus whole-sample terms"):
            loss.whole_sample_terms()
    assert unbinned.whole_sample_terms() == []
