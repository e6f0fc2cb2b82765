"""The cache memory budget (zcache/_engine/budget.py): evictions by least-recent use, never a stale value.

References are plain numpy; every value read under a budget is compared with it (and with the unbudgeted value).
"""

from __future__ import annotations

import gc
import math
import weakref

import numpy as np
import pytest
import tensorflow as tf

import zcache
from zcache._engine.budget import BUDGET
from zcache._engine.dependencies import GRAPH
from zcache.exceptions import CacheBudgetError, IllegalInGraphModeError
from zcache.types import CacheBudgetInfo

N = 200  # events: each per-event cache holds N * 8 bytes
ROW = N * 8


@pytest.fixture(autouse=True)
def _no_budget():
    """Every test starts and ends without a budget."""
    zcache.set_cache_budget(None)
    yield
    zcache.set_cache_budget(None)


class Tree:
    """x -> a = exp(-x/tau); b = a * k; c = a + x**2 (shift); s = sum(b) + sum(c): checked against numpy."""

    def __init__(self, tag: str):
        self.xs = np.linspace(0.0, 2.0, N)
        self.x = zcache.Data(self.xs, name=f"x_{tag}")
        self.tau = zcache.Parameter(f"tau_{tag}", 1.5, lower=0.1)
        self.k = zcache.Parameter(f"k_{tag}", 2.0)
        self.shift = zcache.Parameter(f"shift_{tag}", 0.5)
        self.a = zcache.CachedTensor(lambda: tf.exp(-self.x.value() / self.tau.value()), name=f"a_{tag}")
        self.b = zcache.CachedTensor(lambda: self.a.value() * self.k.value(), name=f"b_{tag}")
        self.c = zcache.CachedTensor(lambda: self.a.value() + self.shift.value() * self.x.value() ** 2, name=f"c_{tag}")
        self.s = zcache.CachedTensor(lambda: tf.reduce_sum(self.b.value()) + tf.reduce_sum(self.c.value()),
                                     name=f"s_{tag}")
        self.caches = [self.a, self.b, self.c, self.s]

    def reference(self) -> float:
        a = np.exp(-self.xs / float(self.tau.value()))
        return float(np.sum(a * float(self.k.value())) + np.sum(a + float(self.shift.value()) * self.xs ** 2))

    def gradient_reference(self) -> list[float]:
        """d s / d (tau, k, shift)."""
        tau, k = float(self.tau.value()), float(self.k.value())
        a = np.exp(-self.xs / tau)
        da = a * self.xs / tau ** 2
        return [float(np.sum(da * k) + np.sum(da)), float(np.sum(a)), float(np.sum(self.xs ** 2))]

    def misses(self) -> list[int]:
        return [c.stats["misses"] for c in self.caches]


def _close(value, reference) -> bool:
    return math.isclose(float(value), reference, rel_tol=1e-12)


@pytest.mark.parametrize("how", ["eager", "traced"])
def test_values_under_a_shrinking_budget_equal_numpy_and_the_unbudgeted_ones(how):
    """A budget below what the tree holds: every read equals numpy; evicted caches recompute (counted as misses)."""
    tree = Tree(f"v{how}")
    read = tree.s.value if how == "eager" else zcache.function(lambda: tree.s.value(), wraps="loss")
    unbudgeted = float(read())
    assert _close(unbudgeted, tree.reference())
    steps = [(None, "tau", 1.2), (ROW + 8, "k", 3.0), (2 * ROW, "shift", 0.1), (0, "tau", 0.9), (ROW, "k", 1.0),
             (None, "shift", 0.7), (3 * ROW + 8, "tau", 1.1)]
    for budget, name, value in steps:
        with zcache.set_cache_budget(budget):
            before = tree.misses()
            assert _close(read(), tree.reference())  # hits or recomputed: never stale
            getattr(tree, name).set_value(value)
            assert _close(read(), tree.reference())
            if budget is not None:
                assert zcache.cache_budget_info().held_bytes <= budget
                assert sum(tree.misses()) > sum(before)
        assert _close(read(), tree.reference())
    evictions = sum(c.stats["evictions"] for c in tree.caches)
    assert evictions > 0 and zcache.cache_budget_info().evictions >= evictions


def test_least_recently_used_is_evicted_first_and_invalid_before_valid():
    x = zcache.Data(np.arange(N, dtype=np.float64), name="x_lru")
    p = zcache.Parameter("p_lru", 1.0)
    c1 = zcache.CachedTensor(lambda: x.value() + 1.0, name="c1")
    c2 = zcache.CachedTensor(lambda: x.value() + 2.0, name="c2")
    c3 = zcache.CachedTensor(lambda: x.value() * p.value(), name="c3")
    with zcache.set_cache_budget(3 * ROW):
        for c in (c1, c2, c3, c1):  # c2 is now the least recently used
            c.value()
        assert zcache.cache_budget_info().held_bytes == 3 * ROW
    with zcache.set_cache_budget(3 * ROW):
        with zcache.set_cache_budget(2 * ROW):
            assert (c1.is_valid, c2.is_valid, c3.is_valid) == (True, False, True)
            assert c2.stats["evictions"] == 1 and c2.stats["nbytes"] == 0 and c1.stats["nbytes"] == ROW
            c2.value()  # recomputed; c3 is now the least recently used
            assert (c1.is_valid, c2.is_valid, c3.is_valid) == (True, True, False)
            info = zcache.cache_budget_info()
            assert (info.held_bytes, info.caches_holding) == (2 * ROW, 2)
        c3.value()
        p.set_value(2.0)  # c3 invalid, though the most recently used
        with zcache.set_cache_budget(2 * ROW):
            assert c3.stats["evictions"] == 2 and c1.is_valid and c2.is_valid
        np.testing.assert_array_equal(c3.value().numpy(), 2.0 * np.arange(N))


def test_traced_calls_stamp_the_caches_their_graphs_used():
    x = zcache.Data(np.arange(N, dtype=np.float64), name="x_tr")
    c1 = zcache.CachedTensor(lambda: x.value() + 1.0, name="t1")
    c2 = zcache.CachedTensor(lambda: x.value() + 2.0, name="t2")
    f1 = zcache.function(lambda: tf.reduce_sum(c1.value()), wraps="loss")
    f2 = zcache.function(lambda: tf.reduce_sum(c2.value()), wraps="loss")
    with zcache.set_cache_budget(2 * ROW):
        f1(), f2(), f1()  # c2 least recently used
        with zcache.set_cache_budget(ROW):
            assert (c1.is_valid, c2.is_valid) == (True, False)
        assert float(f2()) == float(np.sum(np.arange(N) + 2.0))
        assert c2.stats["misses"] == 2
        f2()  # c1 least recently used; a call that only hits still counts as a use
        with zcache.set_cache_budget(ROW):
            assert (c1.is_valid, c2.is_valid) == (False, True)
        assert zcache.cache_budget_info().recomputations >= 1


def test_a_call_may_exceed_the_budget_transiently_then_it_is_enforced():
    tree = Tree("tr")
    loss = zcache.function(lambda: tree.s.value(), wraps="loss")
    with zcache.set_cache_budget(ROW):
        assert _close(loss(), tree.reference())  # fills four caches in one call
        info = zcache.cache_budget_info()
        assert info.held_bytes <= ROW and info.evictions >= 2
        assert tree.s.is_valid  # the most recent (the scalar on top) stays
        tree.tau.set_value(2.0)
        assert _close(loss(), tree.reference())


@pytest.mark.parametrize("how", ["zcache", "plain"])
def test_gradients_through_an_evicted_cache_are_exact(how):
    tree = Tree(f"g{how}")
    params = [tree.tau, tree.k, tree.shift]
    if how == "zcache":
        def grad():
            return zcache.gradient(lambda: tree.s.value(), params)
    else:
        @tf.function(autograph=False)
        def grad():
            with tf.GradientTape() as tape:
                out = tree.s.value()
            return tape.gradient(out, [p.variable for p in params])
    with zcache.set_cache_budget(ROW):
        for value in (1.5, 1.2):
            tree.tau.set_value(value)
            np.testing.assert_allclose([float(g) for g in grad()], tree.gradient_reference(), rtol=1e-12)
            with zcache.set_cache_budget(0):  # evict everything
                pass
            np.testing.assert_allclose([float(g) for g in grad()], tree.gradient_reference(), rtol=1e-12)
            assert _close(tree.s.value(), tree.reference())


def test_plain_tf_function_reads_are_counted_at_the_next_enforcement():
    tree = Tree("plain")
    plain = tf.function(lambda: tree.s.value(), autograph=False)
    with zcache.set_cache_budget(None):
        pass
    assert _close(plain(), tree.reference())
    with zcache.set_cache_budget(10 * ROW):
        tree.tau.set_value(1.0)
        assert _close(plain(), tree.reference())  # refills a, b, c, s: untracked
        with zcache.set_cache_budget(ROW):  # sizes probed: some are evicted
            assert zcache.cache_budget_info().held_bytes <= ROW
        assert _close(plain(), tree.reference())


@pytest.mark.slow  # 10 s: each eviction changes the shapes XLA compiled for (a compile, then an uncompiled run)
def test_jit_compiled_loss_gives_the_same_numbers_under_a_budget():
    tree = Tree("jit")
    with zcache.set_jit_mode("auto"):
        loss = zcache.function(lambda: tree.s.value() * 1.0, wraps="loss")
        with zcache.set_cache_budget(ROW):
            assert _close(loss(), tree.reference())  # uncompiled: first fill
            tree.tau.set_value(1.2)
            assert _close(loss(), tree.reference())  # compiled
            with zcache.set_cache_budget(0):
                pass
            tree.k.set_value(1.5)
            assert _close(loss(), tree.reference())  # evicted caches recomputed
        assert loss.jit_fallback is None


# about 3 (False) and 6 (True) CPU seconds: slow (CONTRIBUTING.md, "Test times"); the fast loop keeps the budget's
# other tests (eviction, transient excess, refused budgets)
@pytest.mark.slow
@pytest.mark.parametrize("compiled", [False, True])
def test_a_fit_under_half_the_budget_gives_the_same_result(compiled):
    """Gauss + Exponential (the shape fixed: its pdf is cached) fitted by Minuit with and without a budget.

    ``compiled=False``: MIGRAD calls the loss's functions, the budget acts after each call; ``True``: one
    program, the budget acts around it (precompute's eager evaluation, HESSE).
    """
    from zcache.loss import ExtendedUnbinnedNLL
    from zcache.minimize import Minuit
    from zcache.models import Exponential, Gaussian, Space, SumPdf

    space = Space("x", 0.0, 10.0)
    mu = zcache.Parameter("mu_bf", 5.0, lower=3.0, upper=7.0)
    sigma = zcache.Parameter("sigma_bf", 0.6, lower=0.1, upper=2.0)
    lam = zcache.Parameter("lam_bf", -0.3, lower=-2.0, upper=-0.01, floating=False)
    nsig = zcache.Parameter("nsig_bf", 150.0, lower=0.0, upper=2000.0)
    nbkg = zcache.Parameter("nbkg_bf", 350.0, lower=0.0, upper=2000.0)
    params = [mu, sigma, nsig, nbkg]
    start = [5.3, 0.7, 200.0, 300.0]
    model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[nsig, nbkg])
    zcache.models.set_seed(3)
    loss = ExtendedUnbinnedNLL(model, model.sample(500))
    results = {}
    for budgeted in (False, True):
        zcache.set_values(params, start)
        budget = None
        if budgeted:
            gc.collect()
            with zcache.set_cache_budget(10**12):
                budget = zcache.cache_budget_info().held_bytes // 2
        with zcache.set_cache_budget(budget):
            results[budgeted] = Minuit(compiled=compiled).minimize(loss)
    assert zcache.cache_budget_info().evictions > 0
    ids = {p.node_id for p in (mu, sigma, lam, nsig, nbkg)}
    ours = [c for c in GRAPH.caches() if not ids.isdisjoint(GRAPH.ancestor_inputs(c.node_id))]
    assert sum(c.state.evictions for c in ours) > 0
    plain, budgeted = results[False], results[True]
    assert plain.valid and budgeted.valid
    for name in plain.values:
        assert budgeted.values[name] == pytest.approx(plain.values[name], rel=1e-10)
        assert budgeted.errors[name] == pytest.approx(plain.errors[name], rel=1e-10)


@pytest.mark.parametrize("bad", [-1, 1.5, float("nan"), 1e6, "1000", True, [10]])
def test_bad_budgets_are_refused_and_leave_the_budget_unchanged(bad):
    with zcache.set_cache_budget(1000):
        with pytest.raises(CacheBudgetError, match="budget is unchanged"):
            zcache.set_cache_budget(bad)
        assert zcache.cache_budget_info().budget == 1000
    assert zcache.cache_budget_info().budget is None


def test_budget_setter_is_refused_inside_a_trace_and_restores_as_a_with_block():
    @tf.function(autograph=False)
    def inside():
        zcache.set_cache_budget(10)
        return tf.constant(0.0)

    with pytest.raises(IllegalInGraphModeError):
        inside()
    with zcache.set_cache_budget(np.int64(4096)):
        info = zcache.cache_budget_info()
        assert isinstance(info, CacheBudgetInfo) and info.budget == 4096
        with zcache.set_cache_budget(None):
            assert zcache.cache_budget_info().budget is None
        assert zcache.cache_budget_info().budget == 4096
    assert zcache.cache_budget_info().budget is None
    restorer = zcache.set_cache_budget(7)
    restorer.restore()
    assert BUDGET.limit is None


@pytest.mark.slow  # about 2.7 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times")
def test_no_budget_leaves_stats_as_they_were_and_caches_are_held_weakly(collect):
    x = zcache.Data(np.arange(N, dtype=np.float64), name="x_weak")
    c = zcache.CachedTensor(lambda: x.value() * 3.0, name="weak")
    c.value()
    assert c.stats == {"hits": 0, "misses": 1}
    with zcache.set_cache_budget(10 * ROW):
        c.value()
        assert c.stats == {"hits": 1, "misses": 1, "evictions": 0, "nbytes": ROW}
        ref = weakref.ref(c)
        del c
        collect()
        assert ref() is None
    c2 = zcache.CachedTensor(lambda: x.value() * 4.0, name="bypassed")
    c2.value()
    c2.set_always_dirty()
    with zcache.set_cache_budget(0):
        assert zcache.cache_budget_info().evictions == BUDGET.evictions
        assert c2.stats["nbytes"] == 0 and c2.stats["evictions"] == 0  # bypassed caches hold nothing


def test_threads_reading_under_a_small_budget_see_exact_values():
    """Evictions happen under the engine lock, between calls: threads that read and write never see a stale value."""
    import threading

    trees = [Tree(f"th{i}") for i in range(2)]
    losses = [zcache.function(lambda t=t: t.s.value(), wraps="loss") for t in trees]
    errors = []

    def work(i):
        tree, loss = trees[i], losses[i]
        try:
            for step in range(4):
                tree.tau.set_value(1.0 + 0.1 * step)
                value, reference = float(loss()), tree.reference()
                if not _close(value, reference):
                    errors.append((i, step, value, reference))
                tree.a.value()  # an eager read beside the other thread's traced calls
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    with zcache.set_cache_budget(2 * ROW):
        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        info = zcache.cache_budget_info()
        assert info.held_bytes <= 2 * ROW and info.evictions > 0
