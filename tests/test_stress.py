"""``tests/stress.py`` (``make stress``): the run's mix and its count per rule, without starting a worker."""

from __future__ import annotations

from collections import Counter

import pytest
import stress
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test


def _hand_out(fit_share: float, total: int, sizes: dict[str, int]) -> Counter[str]:
    """The sequences per machine that the parent's loop hands out (its batch sizes, cut at ``total``)."""
    handed: Counter[str] = Counter()
    while sum(handed.values()) < total:
        machine = stress._next_machine(["cache", "fit"], handed, fit_share)
        handed[machine] += min(sizes[machine], total - sum(handed.values()))
    return handed


def test_the_mix_follows_the_fit_share():
    for share in (0.0, 0.03, 0.06, 1 / 6, 0.5):
        handed = _hand_out(share, 10_000, {"cache": 20, "fit": 4})
        assert sum(handed.values()) == 10_000
        # never more than one fit batch ahead of the share, nor one cache batch behind it
        assert share * 10_000 - 20 <= handed["fit"] <= share * 10_000 + 4, (share, handed)
    assert _hand_out(0.0, 1_000, {"cache": 20, "fit": 4})["fit"] == 0


def test_one_machine_runs_alone_whatever_the_share():
    assert stress._next_machine(["fit"], Counter(), 0.0) == "fit"
    assert stress._next_machine(["cache"], Counter(), 1.0) == "cache"


def test_every_rule_is_named_and_its_calls_counted():
    class Tiny(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.n = 0

        @rule()
        def up(self):
            self.n += 1

        @rule()
        def down(self):
            self.n -= 1

        @invariant()
        def small(self):
            assert abs(self.n) <= 50

    calls, seconds = Counter(), Counter()
    assert stress._count_rule_calls(Tiny, calls, seconds) == ["down", "up"]
    assert stress._count_rule_calls(Tiny, calls, seconds) == ["down", "up"]  # wrapped once, still named
    run_state_machine_as_test(Tiny, settings=settings(max_examples=5, stateful_step_count=10, database=None))
    assert set(calls) <= {"up", "down"} and sum(calls.values()) > 0
    assert set(seconds) == set(calls) and all(s >= 0.0 for s in seconds.values())


def test_a_fit_share_outside_0_to_1_is_refused(capsys):
    for bad in ("-0.1", "1.5", "nan"):
        with pytest.raises(SystemExit) as exit_info:
            stress.main(["--fit-share", bad, "--sequences", "0"])
        assert exit_info.value.code == 2
        assert "--fit-share is a share of the sequences" in capsys.readouterr().err


def test_traces_of_a_batch_are_never_negative_and_hold_nothing():
    """A batch's trace count counts the live functions' new traces; one that traced and died does not make it negative,
    and the snapshot does not keep a dropped function alive."""
    import gc
    import weakref

    import tensorflow as tf

    import zcache

    def traced(k):
        f = zcache.function(lambda: tf.constant(float(k)) * 2.0)
        f()
        return f

    old = [traced(k) for k in range(3)]
    before = stress._zcache_traces()
    dropped = weakref.ref(old[0])
    old[1]()  # a hit: no new trace
    new = traced(9)
    del old
    gc.collect()
    assert dropped() is None
    assert stress._traces_since(before) == new.trace_count == 1


def test_the_fit_batches_gather_in_the_fit_worker():
    """Two workers asking in turn: worker 0 takes every fit batch while it keeps up with the share; the other
    takes one only once the fit machine is more than the lag behind (here: worker 0 never asks)."""
    handed, turns = Counter(), []
    for turn in range(400):
        fit_worker = turn % 2 == 0
        machine = stress._next_machine(["cache", "fit"], handed, 0.05, fit_worker=fit_worker, lag=8)
        handed[machine] += 4 if machine == "fit" else 20
        turns.append((fit_worker, machine))
    assert all(fit_worker for fit_worker, machine in turns if machine == "fit")
    assert 0.05 * sum(handed.values()) - 20 <= handed["fit"] <= 0.05 * sum(handed.values()) + 4
    handed = Counter()
    for _ in range(200):  # only the other worker asks: it keeps the fit machine within the lag of its share
        machine = stress._next_machine(["cache", "fit"], handed, 0.05, fit_worker=False, lag=8)
        handed[machine] += 4 if machine == "fit" else 20
        assert handed["fit"] >= 0.05 * sum(handed.values()) - 8 - 20
    assert handed["fit"] > 0
